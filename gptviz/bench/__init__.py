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
    features.py  --features    steering_sweep against a naive loop; a scan with the shipped SAE
    trace_memory.py --trace-memory  a 1B-shaped Llama's Trace bytes at T = 1,024, full and per page
    graph.py     --graph       attribution graphs at T = 32 (shipped model, a 135M-shaped Llama) against a forward
    figures.py   --figures     the layer × head grid and a layer's heads, built and sent, against a forward

The dashboard itself, in a real Chromium (Playwright and Debian's chromium: the test extras), each
with options of its own after `--`:

    dashboard.py --dashboard   Enter -> heatmap against a trivial rerun; every page at T = 1,024
    sessions.py  --sessions    1, 4, 8 browser sessions on one server; the server's memory over many prompts
    classroom.py --classroom   30 simulated students (ws_client.py) and 3 Chromium pages following a teacher

browser.py (the server and the page helpers) and checkpoints.py (small random checkpoints) are
shared with the browser tests.
"""
