"""The caches and panels of the why, what-if and over-time pages (Heads and Logit lens,
Interventions and Patching, Compare and Timeline, Features and steering, Generate, Attention's why, Graph)."""
