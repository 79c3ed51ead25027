"""The bad-input sweep: its cases (cases.py) and its harness (harness.py); tests/test_bad_input_sweep.py runs them."""
