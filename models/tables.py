"""Every table of teamflow, registered on one metadata (what Alembic compares against)."""
# ruff: noqa: F401, I001  (imported for their tables; base first: it sets the naming convention)

import models.base
import models.agent
import models.alert
import models.approval
import models.inbox
import models.knowledge
import models.task
import models.team
import models.tool
from sqlmodel import SQLModel

metadata = SQLModel.metadata
