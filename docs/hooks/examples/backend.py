"""The example of the ``Backend`` reference page (run by tests/contract/test_docs.py): a backend for a
fictional accelerator, MyNPU, whose vendor ships the runtime module ``mynpu_runtime``."""

import importlib
import importlib.util
import logging

from intelrt.plugin import Backend, BackendStatus, DeviceInfo, hookimpl

log = logging.getLogger(__name__)


class MyNpuBackend(Backend):
    name = "mynpu"
    device_type = "mynpu"
    priority = 10  # below xpu, hpu and cuda: backend="auto" takes it only when none of them is available
    compiler = "mynpu"  # what compile="on" compiles with
    graph_kind = "mynpu"  # the device graphs a decode step is captured in (graph_capturer builds them)

    @classmethod
    def detect(cls, env):
        if importlib.util.find_spec("mynpu_runtime") is None:
            return BackendStatus("mynpu", "mynpu", False,
                                 "the MyNPU runtime (module mynpu_runtime) is not installed", priority=cls.priority)
        runtime = importlib.import_module("mynpu_runtime")
        devices = tuple(DeviceInfo(i, runtime.device_name(i)) for i in range(runtime.device_count()))
        return BackendStatus("mynpu", "mynpu", bool(devices), f"{len(devices)} MyNPU device(s) visible",
                             priority=cls.priority, devices=devices)

    def compile_wrapper(self, compile_fn):
        def compile_for_mynpu(model=None, **kwargs):
            if kwargs.get("backend", "inductor") not in ("mynpu", "eager"):
                log.warning("torch.compile backend %r switched to 'mynpu'", kwargs.get("backend", "inductor"))
                kwargs["backend"] = "mynpu"  # the only compiler that emits MyNPU code
            return compile_fn(model, **kwargs)

        return compile_for_mynpu

    def graph_capturer(self):
        def capture(step, warmup=2):
            import mynpu_runtime  # the vendor's graph API, imported only when decoding

            for _ in range(warmup):
                step()
            graph = mynpu_runtime.Graph()
            with mynpu_runtime.graph_capture(graph):
                step()
            return graph.replay

        return capture


@hookimpl
def intelrt_backends():
    return [MyNpuBackend]
