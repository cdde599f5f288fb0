"""Teaching with the dashboard: lessons as slides, the live class a teacher leads, joining it, polls."""
