#!/bin/sh
# The two databases of deploy/compose.yaml, created on PostgreSQL's first start.
set -e
psql -v ON_ERROR_STOP=1 --username postgres <<SQL
CREATE USER prefect PASSWORD '$POSTGRES_PASSWORD';
CREATE DATABASE prefect OWNER prefect;
CREATE USER teamflow PASSWORD '$POSTGRES_PASSWORD';
CREATE DATABASE teamflow OWNER teamflow;
SQL
