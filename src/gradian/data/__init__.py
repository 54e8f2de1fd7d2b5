"""Input loading and formatting: read train/eval files into rows and tokenize them as the trainer did."""

from gradian.data.formatting import format_example, format_examples
from gradian.data.readers import iter_examples, load_examples, load_examples_with_problems
from gradian.data.rows import ALPACA_PROMPT_INPUT, ALPACA_PROMPT_NO_INPUT, RowProblem, detect_layout, normalize_row
from gradian.data.tokenized import TokenizedRows, source_fingerprint, tokenize_to_disk
from gradian.data.tokenizer import chat_template_text, has_generation_markers, load_tokenizer, set_chat_template
from gradian.data.types import Example, FormatSettings, FormattedExample, MaskMode, RowFormat

__all__ = [
    "ALPACA_PROMPT_INPUT",
    "ALPACA_PROMPT_NO_INPUT",
    "Example",
    "FormatSettings",
    "FormattedExample",
    "MaskMode",
    "RowFormat",
    "RowProblem",
    "TokenizedRows",
    "chat_template_text",
    "detect_layout",
    "format_example",
    "format_examples",
    "has_generation_markers",
    "iter_examples",
    "load_examples",
    "load_examples_with_problems",
    "load_tokenizer",
    "normalize_row",
    "set_chat_template",
    "source_fingerprint",
    "tokenize_to_disk",
]
