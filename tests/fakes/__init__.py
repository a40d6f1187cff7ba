"""Stand-ins for outside services that speak their real protocol over a real socket."""
