"""Stand-in for torchaudio, for LLaMA-Factory 0.9.5's text preprocessing only.

``llamafactory.data.mm_plugin`` imports torchaudio at module level and calls it only to load audio inputs. PyPI's
newest torchaudio (2.11.0) is built against torch 2.11 and its extension fails to load under torch 2.13
("Could not load this library: .../_torchaudio.abi3.so"); no torchaudio wheel for torch 2.13 exists there. Any use
raises, so a row with audio cannot pass silently.
"""

__version__ = "0.0.0+gradian-stub"


def __getattr__(name: str):
    raise ImportError(f"torchaudio stub: torchaudio.{name} is not available (text-only preprocessing)")
