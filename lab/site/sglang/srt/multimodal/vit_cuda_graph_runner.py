"""CUDA graphs for the vision encoder (lab stand-in; lab/site/README.md).

One graph per number of images that share a ViT call, up to SGLANG_VLM_MAX_IMAGES_PER_VIT. Images that
share a call are packed into one variable-length batch whose boundaries (cu_seqlens) depend on the
images, which a captured graph cannot follow.
"""

from sglang.srt.environ import envs


class ViTCudaGraphRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.max_images = envs.SGLANG_VLM_MAX_IMAGES_PER_VIT.get()
        self.max_patches = envs.SGLANG_VIT_CUDA_GRAPH_MAX_PATCHES.get()
        self.graphs = {}
        self.capture()

    def capture(self):
        for num_images in range(self.max_images, 0, -1):
            patches = self.max_patches // num_images
            if self.max_images > 1:
                cu_seqlens = _packed_boundaries(num_images, patches)
                _check_static_boundaries(cu_seqlens)
            self.graphs[num_images] = self.model_runner.model.capture_vit_graph(num_images, patches)


def _packed_boundaries(num_images, patches):
    return [i * patches for i in range(num_images + 1)]


def _check_static_boundaries(cu_seqlens):
    if len(cu_seqlens) > 2:
        raise RuntimeError(
            f"ViT CUDA graph capture failed: a packed batch of {len(cu_seqlens) - 1} images has "
            "image-dependent boundaries (cu_seqlens) that a captured graph cannot replay"
        )
