"""lab: a simulated SGLang-on-GPU host for developing and benchmarking the agent without a GPU.

`python -m lab.launch_server` stands in for `python -m sglang.launch_server`, `python -m lab.nvidia_smi`
for `nvidia-smi`; both answer from the world named by HYPOLOOP_LAB_WORLD (see lab/README.md).
Standard library only; the agent and tools never import this package.
"""
