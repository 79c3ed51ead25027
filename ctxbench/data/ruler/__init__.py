"""RULER-style synthetic long-context tasks (``dataset=ruler``): templates, haystacks, one generator per task family, the loader."""
