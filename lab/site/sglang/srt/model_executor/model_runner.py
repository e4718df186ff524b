"""Runs the model on one GPU: weights, memory pool, CUDA graphs (lab stand-in; lab/site/README.md)."""

from sglang.srt.environ import envs
from sglang.srt.multimodal.vit_cuda_graph_runner import ViTCudaGraphRunner


class ModelRunner:
    def __init__(self, model_config, server_args, gpu_id, tp_rank):
        self.model_config = model_config
        self.server_args = server_args
        self.gpu_id = gpu_id
        self.tp_rank = tp_rank
        self.is_multimodal = model_config.is_multimodal
        self.graph_runner = None
        self.vit_graph_runner = None

    def initialize(self):
        self.load_model()
        self.init_memory_pool()
        self.init_device_graphs()

    def load_model(self):
        self.model = self.model_config.load(self.gpu_id)

    def init_memory_pool(self):
        fraction = self.server_args.mem_fraction_static
        self.kv_pool = self.model.allocate_kv_pool(fraction)

    def init_device_graphs(self):
        if self.server_args.disable_cuda_graph:
            return
        self.graph_runner = self.model.capture_decode_graphs(self.server_args.cuda_graph_max_bs)
        if self.is_multimodal and envs.SGLANG_VIT_ENABLE_CUDA_GRAPH.get():
            self.vit_graph_runner = ViTCudaGraphRunner(self)

    def step(self):
        return self.model.forward(self.kv_pool)
