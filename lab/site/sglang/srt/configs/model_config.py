"""The served model's configuration: its context length (lab stand-in; lab/site/README.md)."""

from sglang.srt.environ import envs


class ModelConfig:
    def __init__(self, hf_text_config, context_length=None):
        self.hf_text_config = hf_text_config
        self._derive_context_length(context_length)

    def _derive_context_length(self, context_length):
        derived = self.hf_text_config.max_position_embeddings
        if context_length is None:
            self.context_len = derived
            return
        if context_length > derived:
            msg = (
                f"Warning: User-specified context_length ({context_length}) is greater than the derived "
                f"context_length ({derived})."
            )
            if envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.get():
                self.context_len = context_length
            else:
                raise ValueError(
                    f"{msg} To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
                )
        else:
            self.context_len = context_length

    @classmethod
    def from_server_args(cls, server_args, hf_text_config):
        return cls(hf_text_config, context_length=server_args.context_length)
