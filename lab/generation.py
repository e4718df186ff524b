"""The simulated engine serving requests: prefill and decode on the world's timeline, the serving faults
(crash, hang, dead scheduler, degenerate output) that hold for a request's batch, and the info payloads.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from lab import responder
from lab.chance import answers_right, hits_request, onset_s, wrong_offset
from lab.engine import Engine, exit_process
from lab.load import BatchView, Request
from lab.rules import matching_faults
from lab.world_types import Fault


class Generation(Engine):
    """Generation requests and the /server_info and /model_info payloads of one launch."""

    def _log_prefill(self, prompt_tokens: int, cached: int) -> None:
        usage = prompt_tokens / max(self.max_total_num_tokens, 1)
        thr = prompt_tokens / max(prompt_tokens / self.world.timing.prefill_tokens_per_s, 1e-3)
        self.log.line(
            f"Prefill batch, #new-seq: 1, #new-token: {prompt_tokens - cached}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: 0, #queue-req: 0, input throughput (token/s): {thr:.2f}, "
            "cuda graph: False",
            source="scheduler",
        )

    def generate(self, req: Request) -> dict[str, Any]:
        """Simulate one generation request. May crash the process or hang, per the world's faults.

        `req.temperature` 0 decodes greedily (argmax: NaN logits give degenerate text, never the sampler's
        `probability tensor contains ...` assert), > 0 samples (torch.multinomial / the sampling kernels,
        where that assert fires): SGLang 0.5.9 and 0.5.23 layers/sampler.py `Sampler.forward`
        (`if sampling_info.is_all_greedy: torch.argmax(logits, -1)`). Faults see it as `sampled`, and the
        request's load shape as `req.*`, `batch.*` and `traffic_s` (lab/load.py).
        Returns {"text", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "latency"}.
        """
        if self.state == "scheduler_dead":
            threading.Event().wait()
        prompt_tokens = req.prompt_tokens or responder.count_tokens(req.text) + 1
        cached = 0 if self.args.get("disable_radix_cache") else min(self.prefix_cache.match(req.text), prompt_tokens - 1)
        page = max(1, int(self.args.get("page_size") or 1))
        cached -= cached % page  # the radix tree matches whole pages (--page-size)
        self._log_prefill(prompt_tokens, cached)
        with self.load_lock:
            self.in_flight += 1
        serving = self.state == "ready"
        if serving:
            self.traffic.begin(self.log.sim_elapsed())
        try:
            return self._generate(req, prompt_tokens, cached)
        finally:
            with self.load_lock:
                self.in_flight -= 1
            if serving:
                self.traffic.end(self.log.sim_elapsed())

    def _decode_faults(
        self, req: Request, prompt_tokens: int, cached: int, completion: int, rid: int
    ) -> tuple[list[Fault], BatchView]:
        """First-decode faults that hold for the request and the batch it joins, and that batch.

        In worlds whose faults read the batch the request first waits for its batch to gather
        (`lab.load.BATCH_WINDOW_S`), so requests sent together share it, as SGLang's scheduler batches them.
        """
        batch = self.batch.join(rid, completion / self.world.timing.decode_tokens_per_s, req.features)
        self.batch.gathered(batch)  # the batch gathers its requests
        now = self.log.sim_elapsed()
        view = self.batch.view(batch, rid)
        with self.load_lock:
            view.running = max(view.running, self.in_flight)
            request = self.requests_seen
            self.requests_seen += 1
            serving_s = now - self.ready_at if self.ready_at is not None else -1.0
            self.ctx.extra.update({
                "running_requests": view.running,
                "sampled": req.temperature > 0,
                "serving_s": max(serving_s, 0.0),
                "traffic_s": self.traffic.seconds(now) if self.ready_at is not None else 0.0,
                "req.prompt_tokens": prompt_tokens,
                "req.max_new_tokens": req.max_new_tokens,
                "req.output_tokens": completion,
                "req.cached_tokens": cached,
                "req.features": sorted(req.features),
                "batch.shrink": view.shrink,
                "batch.features": sorted(view.features),
            })
            faults = [
                f
                for f in matching_faults(self.world, self.ctx, at="first_decode")
                if f.id not in self.dormant
                and hits_request(f, self.seed, request)
                and (f.per_minute <= 0 or serving_s >= onset_s(f, self.seed))
            ]
        return faults, view

    def _healthy_text(self, req: Request, max_new_tokens: int, faults: list[Fault] | None = None) -> tuple[str, bool]:
        """The reply and whether it was cut at `max_new_tokens`: the answer (`_graded_reply`: graded
        questions at the accuracy the batch's `faults` leave; as a JSON object for a json_schema request),
        then, with `ignore_eos`, more text up to exactly `max_new_tokens` tokens."""
        answer = self._graded_reply(req.prompt, faults or [])
        if req.json_key is not None:
            answer = json.dumps({req.json_key: answer})
        full = (responder.THINKING if req.think else "") + answer
        if req.ignore_eos:
            full = responder.continued(full, max_new_tokens)
        return responder.truncate(full, max_new_tokens)

    def _generate(self, req: Request, prompt_tokens: int, cached: int) -> dict[str, Any]:
        max_new_tokens = max(1, int(req.max_new_tokens))
        text, truncated = self._healthy_text(req, max_new_tokens)
        completion = max(1, responder.count_tokens(text))
        degenerate: Fault | None = None
        running = 1
        faults: list[Fault] = []
        if max_new_tokens > 1:
            with self.load_lock:
                self.rids += 1
                rid = self.rids
            faults, view = self._decode_faults(req, prompt_tokens, cached, completion, rid)
            running = view.running
            degenerate = self._serving_faults(faults, view)
        if degenerate is not None:
            text = (
                responder.garbage(degenerate.text, max_new_tokens)
                if degenerate.text is not None
                else responder.degenerate(degenerate.output, max_new_tokens)
            )
            truncated = True
            completion = max_new_tokens
        elif any(f.effect == "degrade_accuracy" for f in faults):
            text, truncated = self._healthy_text(req, max_new_tokens, faults)
            completion = max(1, responder.count_tokens(text))
        timing = self.world.timing
        latency = (
            prompt_tokens - cached
        ) / timing.prefill_tokens_per_s + completion / timing.decode_tokens_per_s
        self._decode(prompt_tokens, cached, completion, running)
        return {
            "text": text,
            "finish_reason": "length" if truncated else "stop",
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "cached_tokens": cached,
            "latency": latency,
        }

    def _graded_reply(self, prompt: str, faults: list[Fault]) -> str:
        """The reply to `prompt`: the healthy one, except that a graded question (one the lab answers by
        rule: `responder.arithmetic`) is answered wrongly, fluently, at the accuracy in force
        (`lab.chance.answers_right`): the model's `[model] accuracy` (default 1), or the lowest of the
        `degrade_accuracy` faults of the request's batch (`accuracy`, or that healthy level less `drop`).
        A degrading fault's lines print once."""
        healthy = float(self.world.model.fields.get("accuracy", 1.0))
        rate = healthy
        for fault in faults:
            if fault.effect == "degrade_accuracy":
                rate = min(rate, fault.accuracy if fault.accuracy is not None else healthy - fault.drop)
                if fault.id not in self.fired:
                    self.fired.add(fault.id)
                    self._emit_fault_lines(fault)
        model = str(self.world.model.path)
        known = self.world.model.fields.get("answers") or []
        if responder.arithmetic(prompt) is None or answers_right(self.seed, prompt, model, healthy, max(rate, 0.0)):
            return responder.answer(prompt, known)
        return responder.wrong_answer(prompt, wrong_offset(self.seed, prompt)) or responder.answer(prompt)

    def _serving_faults(self, faults: list[Fault], view: BatchView) -> Fault | None:
        """Apply the first-decode faults of a request's batch: warnings print once; a hang, a dead
        scheduler, a signal death or a crash never return; the first wrong_output fault is returned
        (the reply is degenerate), None when the reply is sound. A fault on `batch.shrink` acts when the
        batch first shrinks (the shorter requests have their replies by then)."""
        if any(f.effect != "warning" and f.uses("batch.shrink") for f in faults):
            self.log.sleep(view.shrink_in_s + 2.0 / self.world.timing.decode_tokens_per_s)
        for fault in faults:
            if fault.effect == "warning" and fault.id not in self.fired:
                self.fired.add(fault.id)
                self._emit_fault_lines(fault)
        for fault in faults:
            if fault.effect == "hang":
                self._emit_fault_lines(fault)
                threading.Event().wait()
            if fault.effect == "scheduler_dead":
                with self.decode_lock:
                    if self.state != "scheduler_dead":
                        self._scheduler_dead(fault)
                threading.Event().wait()
            if fault.effect == "signal_death":
                with self.decode_lock:
                    self._signal_death(fault)
            if fault.effect == "crash_at_first_decode":
                with self.decode_lock:
                    self.log.sleep(1.0 / self.world.timing.decode_tokens_per_s)
                    self._emit_fault_lines(fault)
                    if not any("sigquit" in spec.text.lower() for spec in fault.lines):
                        # the first request installed the running-phase handler (even the warm-up's)
                        self._sigquit(running=True)
                    exit_process(fault.exit_code if fault.exit_code is not None else -9)
            if fault.effect == "wrong_output":
                self._emit_fault_lines(fault)
                return fault
        return None

    def _decode(self, prompt_tokens: int, cached: int, completion: int, running: int) -> None:
        """Spend the request's prefill and decode time on the simulated clock, with a `Decode batch`
        line every --decode-log-interval tokens (default 40)."""
        timing = self.world.timing
        interval = max(1, int(self.args.get("decode_log_interval") or 40))
        step = 1.0 / timing.decode_tokens_per_s
        self.log.sleep((prompt_tokens - cached) / timing.prefill_tokens_per_s)
        for tok in range(1, completion + 1):
            if tok % interval == 0:
                self.log.sleep(step * interval)
                self.last_gen_throughput = timing.decode_tokens_per_s
                self.log.line(
                    f"Decode batch, #running-req: {running}, #token: {prompt_tokens + tok}, token usage: "
                    f"{(prompt_tokens + tok) / max(self.max_total_num_tokens, 1):.2f}, cuda graph: {self.graph_on}, "
                    f"gen throughput (token/s): {timing.decode_tokens_per_s:.2f}, #queue-req: 0, ",
                    source="scheduler",
                )
        self.log.sleep(step * (completion % interval))

    # ---------------------------------------------------------------------------- info payloads

    def server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {dest: self.args.get(dest) for dest in self.world.version.dests}
        mem = self.ctx.mem
        info.update(
            {
                "max_total_num_tokens": self.max_total_num_tokens,
                "max_req_input_len": max(self.context_len - 5, 1),
                "internal_states": [
                    {
                        "attention_backend": self.args.get("attention_backend"),
                        "chunked_prefill_size": self.args.get("chunked_prefill_size"),
                        "max_running_requests": self.max_running_requests,
                        "last_gen_throughput": self.last_gen_throughput,
                        "memory_usage": {
                            "weight": mem.get("weights_gb"),
                            "kvcache": mem.get("kv_gb"),
                            "token_capacity": self.max_total_num_tokens,
                            "graph": mem.get("graph_gb", 0.0),
                        },
                    }
                ],
                "version": self.world.version.version,
            }
        )
        return info

    def model_info(self) -> dict[str, Any]:
        model = self.world.model
        return {
            "model_path": self.args.get("model_path"),
            "tokenizer_path": self.args.get("tokenizer_path"),
            "is_generation": True,
            "preferred_sampling_params": self.args.get("preferred_sampling_params"),
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model.model_type or None,
            "architectures": [model.architecture],
        }
