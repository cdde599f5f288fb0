"""The Corpus page's parts: the scan caches, the scan form, and its heads and comparison tabs."""
