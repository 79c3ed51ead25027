"""CCM on the tiny model: parallel == recurrent (concat, merge), conditional LoRA exactness,
memory growth, and that training lowers the loss."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.methods.ccm import CCM, Memory
from ctxbench.methods.ccm_lora import CompGate, GatedLoRALinear
from ctxbench.methods.ccm_mask import allowed_real, build_layout, collate_layouts
from ctxbench.models.loading import load_model
from ctxbench.config.schemas import load_conf_file
from ctxbench.config.compose import option_config



def make(mode: str, n_tok: int = 3, attn: str = "eager", lora_std: float = 0.3, **over) -> CCM:
    torch.manual_seed(0)  # LoRA A init draws from the global generator
    bundle = load_model(option_config("model", {"name": "tiny", "attn_implementation": attn, "dtype": "float32"}))
    cfg = load_conf_file(f"conf/method/ccm_{mode}.yaml")
    cfg.n_tok = n_tok
    for k, v in over.items():
        cfg[k] = v
    m = CCM(cfg, bundle)
    if lora_std:
        torch.manual_seed(1)
        for layer in m.lora_layers:  # nonzero adapters, so COMP tokens really differ from the base model
            torch.nn.init.normal_(layer.lora_B, std=lora_std)
    m.eval()
    return m


def rand_steps(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, 250, (n,), generator=g).tolist() for n in lengths]


def recurrent_logits(m: CCM, steps, target):
    mem, out = Memory(), []
    for s in steps:
        mem, lg = m.compress_step(mem, s, return_logits=True)
        out.append(lg[0])
    lg, _ = m.read(mem, target)
    out.append(lg[0])
    return torch.cat(out), mem




@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("mode", ["concat", "merge"])
def test_parallel_forward_equals_recurrent_compression(mode, attn):
    m = make(mode, attn=attn)
    steps, target = rand_steps([7, 5, 9, 4]), rand_steps([6], seed=1)[0]
    batch = m.collate([m.layout(steps, target, loss_steps_from=1)])
    with torch.no_grad():
        par = m.parallel_logits(batch)[0]
    rec, _ = recurrent_logits(m, steps, target)
    text = ~batch["is_comp"][0]
    assert par[text].shape == rec.shape
    assert torch.allclose(par[text], rec, atol=1e-4, rtol=0), float((par[text] - rec).abs().max())
    # the memory matters: the last step's logits change when an earlier step's tokens change
    steps2 = [rand_steps([7], seed=9)[0]] + steps[1:]
    rec2, _ = recurrent_logits(m, steps2, target)
    assert (rec2[-len(target):] - rec[-len(target):]).abs().max() > 1e-3


def test_parallel_equivalence_holds_in_a_padded_batch():
    m = make("merge")
    a = (rand_steps([6, 8, 3]), rand_steps([5], 3)[0])
    b = (rand_steps([4, 4]), rand_steps([9], 4)[0])
    batch = m.collate([m.layout(*a, loss_steps_from=1), m.layout(*b, loss_steps_from=1)])
    with torch.no_grad():
        par = m.parallel_logits(batch)
    for i, (steps, target) in enumerate((a, b)):
        rec, _ = recurrent_logits(m, steps, target)
        keep = batch["valid"][i] & ~batch["is_comp"][i]
        assert torch.allclose(par[i][keep], rec, atol=1e-4, rtol=0)


def test_modes_differ_and_concat_mask_hides_raw_context():
    steps, target = rand_steps([5, 6, 4]), rand_steps([5], 2)[0]
    lay = build_layout(steps, 2, 0, target)
    batch = collate_layouts([lay], 0)
    ok = allowed_real(batch["step"], batch["is_comp"], batch["valid"], "concat")[0]
    step, comp = batch["step"][0], batch["is_comp"][0]
    q = int((step == 3).nonzero()[0])  # first token of step 3
    seen = ok[q].nonzero().flatten()
    assert all(bool(comp[j]) or int(step[j]) == 3 for j in seen)  # only COMP tokens of earlier steps
    assert int(comp[seen].sum()) == 4  # COMP_1 and COMP_2 (2 tokens each)
    # the position counter skips COMP tokens: step 2 starts right after step 1's text
    assert int(batch["position_ids"][0][(step == 2).nonzero()[0]]) == len(steps[0])
    concat, merge = make("concat"), make("merge")
    merge.load_state_dict(concat.state_dict())
    with torch.no_grad():
        lc, lm = concat.parallel_logits(batch), merge.parallel_logits(batch)
    tgt = batch["step"][0] == 4
    assert (lc[0][tgt] - lm[0][tgt]).abs().max() > 1e-4


def test_gated_lora_is_exact_off_comp_positions():
    torch.manual_seed(0)
    base = torch.nn.Linear(16, 12)
    gate = CompGate()
    layer = GatedLoRALinear(base, gate, r=4, alpha=8)
    torch.nn.init.normal_(layer.lora_B, std=1.0)
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[0, 1, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    gate.set(mask)
    y = layer(x)
    assert torch.equal(y[~mask], base(x)[~mask])
    assert (y[mask] - base(x)[mask]).abs().min() > 0
    gate.set(None)
    assert torch.equal(layer(x), base(x))


def test_conditional_lora_leaves_non_comp_positions_equal_to_base_model():
    from ctxbench.methods.ccm_mask import additive

    m = make("concat", lora_std=1.0)
    base = load_model(option_config("model", {"name": "tiny", "attn_implementation": "eager"})).model.eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 250, (2, 12), generator=g)
    gate = torch.zeros(2, 12, dtype=torch.bool)
    gate[0, [3, 4, 9]] = True
    gate[1, [0, 11]] = True
    # causal, but text tokens never see gated tokens: every difference must come from the adapter itself
    ok = torch.ones(12, 12, dtype=torch.bool).tril()[None].repeat(2, 1, 1) & ~(gate[:, None, :] & ~gate[:, :, None])
    mask = additive(ok, torch.float32)
    with torch.no_grad():
        ref = base(input_ids=ids, attention_mask=mask).logits
        m.gate.set(gate)
        try:
            got = m.model(input_ids=ids, attention_mask=mask).logits
        finally:
            m.gate.set(None)
        assert torch.equal(got[~gate], ref[~gate])  # bit for bit, with nonzero LoRA weights
        assert (got[gate] - ref[gate]).abs().amax(-1).min() > 1e-3  # the adapter is live at COMP positions
        # with no COMP token in the input (answer phase) the whole model is the base model
        assert torch.equal(m.model(input_ids=ids).logits, base(input_ids=ids).logits)
        # and in the parallel layout, step 1's text (before any COMP token) matches the base model
        steps = rand_steps([6, 5])
        par = m.parallel_logits(m.collate([m.layout(steps)]))[0]
        assert torch.allclose(par[:6], base(input_ids=torch.tensor([steps[0]])).logits[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode,growth", [("concat", True), ("merge", False)])
def test_memory_size(mode, growth):
    m = make(mode, n_tok=4)
    mem, sizes, nbytes = Memory(), [], []
    for s in rand_steps([5, 9, 3, 7]):
        mem, _ = m.compress_step(mem, s)
        sizes.append(mem.slots)
        nbytes.append(mem.kv_bytes)
    layers = m.model.config.num_hidden_layers
    assert len(mem.keys) == layers
    if growth:
        assert sizes == [4, 8, 12, 16]
        assert nbytes[1] == 2 * nbytes[0]
    else:
        assert sizes == [4, 4, 4, 4]
        assert len(set(nbytes)) == 1
    kvh, hd = mem.keys[0].shape[1], mem.keys[0].shape[3]
    assert nbytes[-1] == sizes[-1] * layers * kvh * hd * 2 * 4  # K and V, fp32
    assert mem.text_pos == 5 + 9 + 3 + 7


@pytest.mark.parametrize("mode", ["concat", "merge"])
def test_training_steps_reduce_the_loss(mode):
    m = make(mode, lora_std=0.0)
    m.train()
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or n == "comp_embeddings" for n in trainable)
    assert set(m.trainable_state_dict()) == set(trainable)
    text = ("the cat sat on the mat. " * 12).encode()
    ids = [b + 5 for b in text]
    steps = [ids[i:i + 24] for i in range(0, 96, 24)]
    batch = m.collate([m.layout(steps), m.layout(steps[1:])])
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=3e-2)
    first = float(m(batch).loss.detach())
    for _ in range(12):
        out = m(batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert out.n_tokens == 3 * 23 + 2 * 23
    assert float(m(batch).loss.detach()) < first - 0.3


@pytest.mark.parametrize("mode", ["concat", "merge"])
def test_gradient_checkpointing_gives_the_same_gradients(mode):
    grads = []
    for ckpt in (False, True):
        m = make(mode)
        if ckpt:
            m.model.gradient_checkpointing_enable()
        m.train()
        batch = m.collate([m.layout(rand_steps([6, 5, 7]), rand_steps([4], 1)[0])])
        m(batch).loss.backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], atol=1e-5), n
    assert any(g.abs().sum() > 0 for n, g in grads[1].items() if "lora_A" in n)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["concat", "merge"])
def test_parallel_equals_recurrent_on_packaged_smollm2(mode):
    """The same equivalence on the real model (30 layers, GQA 9/3 heads, SDPA)."""
    bundle = load_model(load_conf_file("conf/model/smollm2_135m.yaml"))
    cfg = load_conf_file(f"conf/method/ccm_{mode}.yaml")
    cfg.n_tok = 4
    torch.manual_seed(0)
    m = CCM(cfg, bundle)
    for layer in m.lora_layers:
        torch.nn.init.normal_(layer.lora_B, std=0.02)
    m.eval()
    text = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings"
    ids = m.encode(text)
    steps, target = [ids[:8], ids[8:15], ids[15:24]], ids[24:]
    with torch.no_grad():
        par = m.parallel_logits(m.collate([m.layout(steps, target, loss_steps_from=1)]))[0]
    rec, mem = recurrent_logits(m, steps, target)
    keep = ~m.collate([m.layout(steps, target)])["is_comp"][0]
    assert torch.allclose(par[keep], rec, atol=1e-3, rtol=0), float((par[keep] - rec).abs().max())
    assert mem.slots == (12 if mode == "concat" else 4)


@pytest.mark.parametrize("mode", ["concat", "merge"])
def test_non_recurrent_parallel_equals_stepwise_and_compresses_each_step_alone(mode):
    """method.recurrent=false (the reference's MetaICL / LaMP masks): each step is compressed without
    the memory before it, only the target reads memory; the parallel form equals step-by-step."""
    m = make(mode, recurrent=False)
    steps, target = rand_steps([7, 5, 9]), rand_steps([6], seed=1)[0]
    batch = m.collate([m.layout(steps, target, loss_steps_from=1)])
    with torch.no_grad():
        par = m.parallel_logits(batch)[0]
    rec, mem = recurrent_logits(m, steps, target)
    text = ~batch["is_comp"][0]
    assert torch.allclose(par[text], rec, atol=1e-4, rtol=0), float((par[text] - rec).abs().max())
    # step 2's text and COMP ignore step 1: its logits equal step 2 compressed alone (at the same positions)
    _, alone = m.compress_step(Memory(text_pos=len(steps[0])), steps[1], return_logits=True)
    n1, n2 = len(steps[0]), len(steps[1])
    assert torch.allclose(rec[n1:n1 + n2], alone[0], atol=1e-5, rtol=0)
    rm = make(mode, recurrent=True)  # the recurrent form reads step 1 there
    rec_r, _ = recurrent_logits(rm, steps, target)
    assert (rec_r[n1:n1 + n2] - rec[n1:n1 + n2]).abs().max() > 1e-3
    # the target still reads every step: change step 1 and the target's logits move
    rec2, _ = recurrent_logits(m, [rand_steps([7], seed=9)[0]] + steps[1:], target)
    assert (rec2[-len(target):] - rec[-len(target):]).abs().max() > 1e-3
    assert mem.slots == (3 * m.n_tok if mode == "concat" else m.n_tok)


def test_merge_memory_is_the_running_mean_of_each_steps_comp_kv():
    """Merge keeps a_t = 1/t: after T steps the memory is the plain mean of the T COMP key/values, each
    taken from the step compressed on top of the memory before it."""
    m = make("merge")
    steps = rand_steps([6, 4, 8, 5])
    mem, per_step = Memory(), []
    for s in steps:
        prev = mem
        mem, _ = m.compress_step(prev, s)
        concat = make("concat")  # the same weights: concat's newest n_tok slots are this step's COMP KV
        concat.load_state_dict(m.state_dict())
        one, _ = concat.compress_step(prev, s)
        per_step.append(([k[:, :, -m.n_tok:] for k in one.keys], [v[:, :, -m.n_tok:] for v in one.values]))
        for layer in range(len(mem.keys)):
            want_k = torch.stack([ks[layer] for ks, _ in per_step]).mean(0)
            want_v = torch.stack([vs[layer] for _, vs in per_step]).mean(0)
            assert torch.allclose(mem.keys[layer], want_k, atol=1e-5) and torch.allclose(mem.values[layer], want_v, atol=1e-5)
    assert mem.slots == m.n_tok and mem.n_steps == 4


def test_output_only_loss_leaves_the_steps_text_unlabelled():
    steps, target = rand_steps([5, 6, 4]), rand_steps([5], 2)[0]
    both, out = make("concat"), make("concat", loss_on="output")
    lb, lo = both.layout(steps, target), out.layout(steps, target)
    step_b, step_o = torch.tensor(lb.step), torch.tensor(lo.step)
    lab_b, lab_o = torch.tensor(lb.labels), torch.tensor(lo.labels)
    assert (lab_b[(step_b >= 2) & (step_b <= 3)] != -100).any()  # default: steps 2.. carry continuation labels
    assert (lab_o[step_o <= 3] == -100).all() and (lab_o[step_o == 4] != -100).any()  # output only: the target
    with pytest.raises(ValueError, match="method.loss_on"):
        make("concat", loss_on="all")
