"""parsers.python_values reads an engine argument's value as ast.literal_eval does (or keeps the text where that raises)."""

from __future__ import annotations

import ast
import warnings
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from oomdoctor.evidence.parsers.python_values import python_value
from oomdoctor.evidence.parsers.sglang import parse_server_args

# The value forms the parsers capture: SGLang's ServerArgs (parsers/sglang.py, _ARG_RE), vLLM's dict
# items and config items (parsers/vllm.py, _DICT_ITEM_RE and _CONFIG_ITEM_RE).
VALUE = r"'(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|[\w.+/-]+"


def reference(raw: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes hypothesis makes up (DeprecationWarning; SyntaxWarning from 3.12)
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return raw


@given(st.from_regex(VALUE, fullmatch=True))
@example("True")
@example("None")
@example("0.85")
@example("-3")
@example("+5")
@example("007")
@example("1_000")
@example("0x10")
@example("1e5")
@example(".5")
@example("5.")
@example("1.5.3")
@example("inf")
@example("auto")
@example("_x")
@example("bfloat16")
@example("'/models/Qwen3-235B'")
@example('"a\'b"')
@example(r"'it\'s'")
@example(r"'C:\\models'")
@example("''")
@example("[1, 2]")
@example("/models/x")
@example("{'image': 1}")
def test_python_value_agrees_with_literal_eval(raw: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ours = python_value(raw)
    theirs = reference(raw)
    assert type(ours) is type(theirs) and (ours == theirs or (ours != ours and theirs != theirs)), raw


def test_server_args_values_keep_their_types() -> None:
    args = parse_server_args("server_args=ServerArgs(model_path='/m/Qwen', tp_size=4, mem_fraction_static=0.85, disable_cuda_graph=False, chunked_prefill_size=None, attention_backend=None)")
    assert args["model_path"] == "/m/Qwen" and args["tp_size"] == 4 and args["mem_fraction_static"] == 0.85
    assert args["disable_cuda_graph"] is False and args["chunked_prefill_size"] is None


def test_an_invalid_escape_warns_nobody() -> None:
    import warnings

    from oomdoctor.evidence.parsers.python_values import python_value

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SyntaxWarning (3.12+) or DeprecationWarning (3.10-3.11) would raise here
        assert python_value(r"'C:\pth\mdl'") == "C:\\pth\\mdl"  # \p, \m: invalid escapes, kept
