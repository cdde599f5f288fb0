"""Where a checkpoint or an SAE comes from (shipped, a path, an upload, the demo),
and what a class server opens."""
