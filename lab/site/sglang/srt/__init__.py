"""Lab stand-in for ``sglang.srt`` (lab/site/README.md)."""
