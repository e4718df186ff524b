"""The scheduler process of the simulated release (lab stand-in; lab/site/README.md)."""

from sglang.srt.model_executor.model_runner import ModelRunner


class Scheduler:
    def __init__(self, server_args, model_config, gpu_id, tp_rank):
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.model_runner = ModelRunner(model_config, server_args, gpu_id, tp_rank)
        self.model_runner.initialize()

    def event_loop(self):
        while True:
            self.model_runner.step()


def run_scheduler_process(server_args, model_config, gpu_id, tp_rank):
    scheduler = Scheduler(server_args, model_config, gpu_id, tp_rank)
    scheduler.event_loop()
