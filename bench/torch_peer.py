"""PyTorch on the same card as tsi's GPU benches (bench/torch-peer.ts runs this): the peer a GPU user
would otherwise pick. `llm`: a GPT-2 of the bench decoder's shape (random weights) through Hugging
Face transformers' `generate`, greedy, exactly `tokens` new tokens after a `prompt`-token prompt, a
batch of `streams` prompts at once, in fp32 and fp16 (eager). `conv`: torchvision's ResNet-18 (the
shape of bench/conv-model.ts at width 64) or ResNet-50 (`--arch`), random weights, eager fp32 and
fp16 at each batch size and `--size` pixels. `export`: that torchvision model (random weights) written as
ONNX to `--out` (input `image`, output `logits`, batch dimension dynamic) for bench/gpu.ts's `--onnx`.
Prints one JSON object per line."""

import argparse
import json
import time

import torch


def timed(fn, min_s=2.0):
    """Runs fn once to warm up, then repeatedly for at least min_s; seconds per call."""
    fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt / n


def llm(a):
    from transformers import GPT2Config, GPT2LMHeadModel

    eos = a.vocab - 1
    cfg = GPT2Config(vocab_size=a.vocab, n_positions=a.context, n_embd=a.d, n_layer=a.layers, n_head=a.heads,
                     n_inner=a.ffn, bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        model = GPT2LMHeadModel(cfg).to("cuda", dtype).eval()
        for streams in a.streams:
            ids = torch.randint(0, eos, (streams, a.prompt), device="cuda")
            mask = torch.ones_like(ids)

            def run():
                with torch.inference_mode():
                    model.generate(ids, attention_mask=mask, max_new_tokens=a.tokens, min_new_tokens=a.tokens,
                                   do_sample=False, pad_token_id=eos)

            s = timed(run)
            print(json.dumps({"what": "llm", "dtype": str(dtype).split(".")[-1], "streams": streams,
                              "tokens_per_s": streams * a.tokens / s}), flush=True)
        del model
        torch.cuda.empty_cache()


def conv(a):
    import torchvision

    for dtype in (torch.float32, torch.float16):
        model = getattr(torchvision.models, a.arch)(weights=None).to("cuda", dtype).eval()
        for batch in a.batches:
            x = torch.randn(batch, 3, a.size, a.size, device="cuda", dtype=dtype)

            def run():
                with torch.inference_mode():
                    model(x)

            s = timed(run)
            print(json.dumps({"what": "conv", "dtype": str(dtype).split(".")[-1], "batch": batch,
                              "images_per_s": batch / s}), flush=True)


def export(a):
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, a.arch)(weights=None).eval()
    x = torch.randn(1, 3, a.size, a.size)
    torch.onnx.export(model, (x,), a.out, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17, dynamo=False)
    print(json.dumps({"what": "export", "arch": a.arch, "size": a.size, "out": a.out}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["llm", "conv", "export"])
    p.add_argument("--out", default="model.onnx")
    ints = lambda s: [int(x) for x in s.split(",")]
    p.add_argument("--streams", type=ints, default=[1, 8, 32])
    p.add_argument("--batches", type=ints, default=[1, 8, 32])
    p.add_argument("--arch", default="resnet18", choices=["resnet18", "resnet50"])
    for k, v in dict(vocab=2048, context=512, d=1024, layers=8, heads=16, ffn=4096, prompt=40, tokens=32, size=224).items():
        p.add_argument(f"--{k}", type=int, default=v)
    a = p.parse_args()
    {"llm": llm, "conv": conv, "export": export}[a.what](a)
