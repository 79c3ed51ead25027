"""CCM on the eval-task protocol: the base model with the gate off, the memory path equal to ccm_eval's
window loss, and eval task=perplexity / choice end to end on a tiny model."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.core.task_protocol import start_ids
from ctxbench.methods.ccm_eval import _ccm_loss
from ctxbench.models.loading import load_model
from method_cases import build_case, ids
from test_tasks import rows, run
from ctxbench.config.compose import option_config


@pytest.mark.parametrize("case", ["ccm_concat", "ccm_merge"])
def test_plain_lm_is_the_base_model_and_memory_scores_as_ccm_eval(case):
    m, _ = build_case(case, torch.float32)
    m.eval()
    plain = load_model(option_config("model", {"name": "tiny", "dtype": "float32"})).model
    x = torch.tensor([ids(20, 7)])
    with m.plain_lm() as lm:
        assert torch.allclose(lm(input_ids=x).logits, plain(input_ids=x).logits, atol=1e-5)
    m.cfg.step_tokens = 8
    window = [ids(8, 1), ids(8, 2), ids(8, 3), ids(8, 4)]
    # ccm_eval scores the last chunk after its first: its first token is a one-token prompt here
    s = m.score_continuation([sum(window[:3], [])], window[3][1:], prompt=window[3][:1])  # 8-token steps
    want, n = _ccm_loss(m, window)
    assert s.tokens == n == 7 and s.nll == pytest.approx(want, rel=1e-5)
    # with no prompt every target token is scored, the first from the start token read after the memory
    whole = m.score_continuation([sum(window[:3], [])], window[3])
    lead = m.score_continuation([sum(window[:3], [])], window[3], prompt=start_ids(m.tokenizer))
    assert whole.tokens == 8 and whole.nll == pytest.approx(lead.nll, rel=1e-6)
    assert s.memory_slots == m.n_tok * (3 if case == "ccm_concat" else 1)
    a = m.score_continuation([sum(window[:3], [])], ids(3, 8), prompt=ids(4, 9))
    b = m.score_continuation([sum(window[:3], [])], ids(3, 10), prompt=ids(4, 9))
    assert a.tokens == b.tokens == 3 and a.nll != pytest.approx(b.nll, rel=1e-4)   # options rank apart


def test_perplexity_and_choice_tasks_run_ccm(tmp_path):
    r = rows(run(tmp_path / "p", ["task=perplexity", "method=ccm_concat", "model=tiny", "dataset=text_sample",
                                  "task.lengths=[32]", "task.target_tokens=8", "task.windows=2", "progress=false",
                                  "method.step_tokens=16"]))
    assert r[("ccm_concat", 32)]["memory_slots"] == 2 * 8 and r[("ccm_concat", 32)]["tokens"] == 2 * 8  # as the baselines
    assert {("full_context", 32), ("no_context", 32)} <= set(r)
    c = rows(run(tmp_path / "c", ["task=choice", "method=ccm_merge", "model=tiny", "dataset=dialsim_sample",
                                  "progress=false"]))
    assert c[("ccm_merge", "overall")]["n"] == 5
