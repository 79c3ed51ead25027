"""``python tests/torch_blocked.py ARGS...`` = ``python -m ctxbench ARGS...`` in a process where importing
torch or transformers raises ImportError: a command that needs neither answers as usual, one that
reaches for them fails with a traceback naming the import."""
import runpy
import sys


class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(f"torch_blocked: {name} was imported")
        return None


sys.meta_path.insert(0, _Block())
sys.argv = ["ctxbench", *sys.argv[1:]]
runpy.run_module("ctxbench", run_name="__main__", alter_sys=True)
