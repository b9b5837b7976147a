#!/usr/bin/env python3
"""nanoGPT's GPT (karpathy/nanoGPT model.py and train.py, as ../shared/docs/models-facts.md
describes them) in PyTorch: the peer of Spire's examples/gpt. Used three ways:

  import            tests/examples/gpt_torch.py (step parity) builds GPT(...) from here and
                    loads Spire's weights with load_spire_weights().
  train             nanoGPT's training loop on a text file, with Spire's data split (the
                    sorted distinct bytes of the whole file as the vocabulary, the first 90%
                    of the tokens for training, the rest for validation), for the baby run
                    against examples/gpt (bench/gpt_train_vs_torch.sh):
                      nanogpt_torch.py train --data FILE [--out curve.json] [model and
                      schedule flags, nanoGPT's names]
                    Prints "iter N: loss X, time Y ms" and "step N: train loss X, val loss Y"
                    lines as nanoGPT does, and writes the evaluation curve as JSON.
  step              one training step timed (bench/gpt_vs_torch.sh): tokens/s and the
                    process's peak resident memory, ending with a RESULT line.

The model: token and learned position embeddings, pre-LayerNorm blocks (causal
self-attention through F.scaled_dot_product_attention, a 4x MLP with exact GELU unless
--gelu tanh), a final LayerNorm, lm_head tied to wte; no biases unless --bias; init
N(0, 0.02), c_proj weights N(0, 0.02 / sqrt(2 n_layer)). AdamW with nanoGPT's groups (every
parameter of dim >= 2 decayed), clip_grad_norm_, the cosine schedule with linear warmup
lr * (it + 1) / (warmup + 1).
"""

import argparse
import json
import math
import sys
import time


def build_gpt_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LayerNorm(nn.Module):
        """LayerNorm with an optional bias (nanoGPT's: PyTorch's has no bias=False before 2.1)."""

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.n_head, self.n_embd, self.dropout = cfg["n_head"], cfg["n_embd"], cfg.get("dropout", 0.0)
            self.c_attn = nn.Linear(self.n_embd, 3 * self.n_embd, bias=cfg["bias"])
            self.c_proj = nn.Linear(self.n_embd, self.n_embd, bias=cfg["bias"])
            self.resid_dropout = nn.Dropout(self.dropout)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.dropout if self.training else 0,
                                               is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"], bias=cfg["bias"])
            self.gelu = nn.GELU(approximate=cfg.get("gelu", "none"))
            self.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
            self.dropout = nn.Dropout(cfg.get("dropout", 0.0))

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.ln_1 = LayerNorm(cfg["n_embd"], cfg["bias"])
            self.attn = CausalSelfAttention(cfg)
            self.ln_2 = LayerNorm(cfg["n_embd"], cfg["bias"])
            self.mlp = MLP(cfg)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
                wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
                drop=nn.Dropout(cfg.get("dropout", 0.0)),
                h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
                ln_f=LayerNorm(cfg["n_embd"], cfg["bias"]),
            ))
            self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # tied
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layer"]))

        def _init_weights(self, m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            t = idx.size(1)
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            params = [p for p in self.parameters() if p.requires_grad]
            groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=1e-8)

    return GPT


def spire_names(cfg):
    """(Spire variable name, nanoGPT parameter name, transposed?) for every parameter."""
    out = [("wte/W", "transformer.wte.weight", False), ("wpe/W", "transformer.wpe.weight", False)]
    for i in range(cfg["n_layer"]):
        h, p = "h%d/" % i, "transformer.h.%d." % i
        out += [(h + "ln_1/gamma", p + "ln_1.weight", False),
                (h + "attn/c_attn/W", p + "attn.c_attn.weight", True),
                (h + "attn/c_proj/W", p + "attn.c_proj.weight", True),
                (h + "ln_2/gamma", p + "ln_2.weight", False),
                (h + "mlp/c_fc/W", p + "mlp.c_fc.weight", True),
                (h + "mlp/c_proj/W", p + "mlp.c_proj.weight", True)]
        if cfg["bias"]:
            out += [(h + "ln_1/beta", p + "ln_1.bias", False),
                    (h + "attn/c_attn/b", p + "attn.c_attn.bias", False),
                    (h + "attn/c_proj/b", p + "attn.c_proj.bias", False),
                    (h + "ln_2/beta", p + "ln_2.bias", False),
                    (h + "mlp/c_fc/b", p + "mlp.c_fc.bias", False),
                    (h + "mlp/c_proj/b", p + "mlp.c_proj.bias", False)]
    out.append(("ln_f/gamma", "transformer.ln_f.weight", False))
    if cfg["bias"]:
        out.append(("ln_f/beta", "transformer.ln_f.bias", False))
    return out


def load_spire_weights(model, tensors):
    """Copies Spire's variables (name -> tensor; dense weights [in, out]) into the model."""
    import torch
    params = dict(model.named_parameters())
    with torch.no_grad():
        for sname, pname, transposed in spire_names(model.cfg):
            t = tensors[sname]
            params[pname].copy_(t.t() if transposed else t)


def spire_weights(model):
    """The model's parameters under Spire's names (dense weights transposed to [in, out])."""
    params = dict(model.named_parameters())
    return {s: (params[p].detach().t() if tr else params[p].detach())
            for s, p, tr in spire_names(model.cfg)}


def get_lr(it, lr, min_lr, warmup, decay_iters):
    """nanoGPT's get_lr (warmup lr * (it + 1) / (warmup + 1), since 2024-12-09)."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def peak_rss_mib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return -1.0


def model_args(p):
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_embd", type=int, default=128)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=12)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--bias", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    p.add_argument("--seed", type=int, default=1337)


def load_text(path):
    data = open(path, "rb").read()
    vocab = sorted(set(data))
    stoi = {b: i for i, b in enumerate(vocab)}
    return data, vocab, stoi


def cmd_train(a):
    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data, vocab, stoi = load_text(a.data)
    tokens = torch.tensor([stoi[b] for b in data], dtype=torch.long)
    n = int(len(tokens) * 0.9)
    splits = {"train": tokens[:n], "val": tokens[n:]}
    cfg = dict(vocab_size=len(vocab), block_size=a.block_size, n_layer=a.n_layer, n_head=a.n_head,
               n_embd=a.n_embd, bias=a.bias, dropout=a.dropout, gelu="none")
    model = build_gpt_class()(cfg)
    opt = model.configure_optimizers(a.weight_decay, a.learning_rate, (a.beta1, a.beta2))

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - a.block_size, (a.batch_size,))
        x = torch.stack([d[i:i + a.block_size] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + a.block_size] for i in ix])
        return x, y

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in ("train", "val"):
            losses = torch.zeros(a.eval_iters)
            for k in range(a.eval_iters):
                _, loss = model(*get_batch(split))
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        model.train()
        return out

    curve = []
    x, y = get_batch("train")
    t_start = t0 = time.time()
    train_s = 0.0
    for it in range(a.max_iters + 1):
        lr = get_lr(it, a.learning_rate, a.min_lr, a.warmup_iters, a.lr_decay_iters)
        for g in opt.param_groups:
            g["lr"] = lr
        if it % a.eval_interval == 0:
            losses = estimate_loss()
            print("step %d: train loss %.4f, val loss %.4f" % (it, losses["train"], losses["val"]), flush=True)
            curve.append({"iter": it, "train_loss": losses["train"], "val_loss": losses["val"],
                          "elapsed_s": time.time() - t_start, "train_s": train_s})
            t0 = time.time()
        if it == a.max_iters:
            break
        _, loss = model(x, y)
        x, y = get_batch("train")
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.time()
        train_s += t1 - t0
        if it % a.log_interval == 0:
            print("iter %d: loss %.4f, time %.2f ms" % (it, loss.item(), (t1 - t0) * 1000), flush=True)
        t0 = t1
    result = {"engine": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
              "config": vars(a), "curve": curve, "total_s": time.time() - t_start, "train_s": train_s,
              "peak_rss_mib": peak_rss_mib()}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print("final val loss %.4f (iter %d), %.1f s training, %.1f s in all" %
          (curve[-1]["val_loss"], curve[-1]["iter"], train_s, result["total_s"]))
    return 0


def cmd_step(a):
    try:
        import torch
    except ImportError as e:
        print("nanogpt_torch: skipped: PyTorch is not installed (%s)" % e)
        return 0
    start_rss = peak_rss_mib()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = dict(vocab_size=a.vocab_size, block_size=a.block_size, n_layer=a.n_layer, n_head=a.n_head,
               n_embd=a.n_embd, bias=a.bias, dropout=a.dropout, gelu="none")
    dev = torch.device(a.device)
    gpu = a.device == "cuda"
    if gpu:  # TF32 off, as Spire's default
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = build_gpt_class()(cfg).to(dev)
    if a.compile:
        model = torch.compile(model)
    opt = (model._orig_mod if a.compile else model).configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    g = torch.Generator().manual_seed(42)
    x = torch.randint(0, a.vocab_size, (a.batch_size, a.block_size), generator=g)
    y = torch.randint(0, a.vocab_size, (a.batch_size, a.block_size), generator=g)
    autocast = a.precision == "bf16"

    def step():
        # The batch comes from the host every step (as Spire's feeds).
        xb, yb = (x.to(dev), y.to(dev)) if gpu else (x, y)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=autocast):
            _, loss = model(xb, yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(a.warmup):
        step()
    ms = []
    cpu0 = time.process_time()
    loss = float("nan")
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        if gpu:
            torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3 / a.steps)
    cpu_ms = (time.process_time() - cpu0) * 1e3 / (a.windows * a.steps)
    ms.sort()
    med = ms[len(ms) // 2]
    tokens = a.batch_size * a.block_size
    print("RESULT engine=torch%s precision=%s threads=%d tokens_per_s=%.1f ms_per_step=%.2f ms_best=%.2f "
          "cpu_ms_per_step=%.2f peak_rss_mib=%.1f start_rss_mib=%.1f loss_last=%.4f" %
          ("-compile" if a.compile else "", a.precision, torch.get_num_threads(), tokens * 1e3 / med, med, ms[0],
           cpu_ms, peak_rss_mib(), start_rss, loss)
          + (" device=gpu device_peak_mib=%.1f" % (torch.cuda.max_memory_allocated() / 2**20) if gpu else ""),
          flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="nanoGPT's training loop on a text file")
    model_args(t)
    t.add_argument("--data", required=True)
    t.add_argument("--out", default="")
    t.add_argument("--max_iters", type=int, default=2000)
    t.add_argument("--lr_decay_iters", type=int, default=2000)
    t.add_argument("--learning_rate", type=float, default=1e-3)
    t.add_argument("--min_lr", type=float, default=1e-4)
    t.add_argument("--warmup_iters", type=int, default=100)
    t.add_argument("--beta1", type=float, default=0.9)
    t.add_argument("--beta2", type=float, default=0.99)
    t.add_argument("--weight_decay", type=float, default=0.1)
    t.add_argument("--grad_clip", type=float, default=1.0)
    t.add_argument("--eval_interval", type=int, default=250)
    t.add_argument("--eval_iters", type=int, default=20)
    t.add_argument("--log_interval", type=int, default=100)
    s = sub.add_parser("step", help="one training step, timed")
    model_args(s)
    s.add_argument("--vocab_size", type=int, default=65)
    s.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    s.add_argument("--compile", action="store_true")
    s.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument("--windows", type=int, default=3)
    s.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    return cmd_train(a) if a.cmd == "train" else cmd_step(a)


if __name__ == "__main__":
    sys.exit(main())
