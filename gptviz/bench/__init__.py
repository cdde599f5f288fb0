"""Benchmarks: each prints numbers measured in one run against a baseline of the same run, and
asserts nothing about them. Every one is reachable as `gptviz bench --...`:

    forward.py   (default)     capture against a plain forward pass; --peers adds Hugging Face
    why.py       --why         head scores and the logit lens at T = 1024 against their floors
    scan.py      --scan        the corpus scan against a plain forward; the Ray engine
    families.py  --families    a SmolLM2-135M-shaped Llama against transformers' LlamaForCausalLM
    patching.py  --patching    patching_sweep against the naive loop (and TransformerLens)
    generate.py  --generate    decoding with per-step capture against Hugging Face's generate
    load.py      --load        loading bf16 shards (Llama-3.2-1B shape; --shape 8b) against from_pretrained
    lessons.py   --lessons     hostile 64 KB lesson files: bounded parsing against plain tomllib
"""
