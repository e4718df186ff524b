"""Lab stand-in for an installed ``sglang`` package: read by hypoloop, never imported (lab/site/README.md)."""
