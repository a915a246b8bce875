"""'Device' memory for the device-backend tests, through a shim's own C API
(ctypes): allocation, deferred uploads on a producer stream, events, and
synchronous downloads. The same calls a framework makes on real hardware."""
import ctypes
import os

import numpy as np

from fuseopt.base import devices


class _Api:
    """The few runtime calls a test needs, for one device kind."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name in self.FUNCTIONS:
            getattr(self.lib, name).restype = ctypes.c_int

    def check(self, rc, what):
        assert rc == 0, "%s returned %d" % (what, rc)


class CudaApi(_Api):
    kind = devices.CUDA
    FUNCTIONS = ("cudaSetDevice", "cudaMalloc", "cudaFree", "cudaMemcpyAsync", "cudaMemcpy",
                 "cudaStreamCreate", "cudaEventCreate", "cudaEventRecord")

    def __init__(self):
        super().__init__(os.environ["FUSEOPT_CUDART_LIBRARY"])
        self.check(self.lib.cudaSetDevice(0), "cudaSetDevice")

    def malloc(self, nbytes):
        p = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes)), "cudaMalloc")
        return p.value

    def free(self, ptr):
        self.check(self.lib.cudaFree(ctypes.c_void_p(ptr)), "cudaFree")

    def upload_async(self, dst, host, stream):  # 1 = cudaMemcpyHostToDevice
        self.check(self.lib.cudaMemcpyAsync(ctypes.c_void_p(dst), host.ctypes.data_as(ctypes.c_void_p),
                                            ctypes.c_size_t(host.nbytes), 1, ctypes.c_void_p(stream)),
                   "cudaMemcpyAsync")

    def download(self, host, src):  # 2 = cudaMemcpyDeviceToHost
        self.check(self.lib.cudaMemcpy(host.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(src),
                                       ctypes.c_size_t(host.nbytes), 2), "cudaMemcpy")

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.lib.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
        return s.value

    def event(self):
        e = ctypes.c_void_p()
        self.check(self.lib.cudaEventCreate(ctypes.byref(e)), "cudaEventCreate")
        return e.value

    def record(self, event, stream):
        self.check(self.lib.cudaEventRecord(ctypes.c_void_p(event), ctypes.c_void_p(stream)),
                   "cudaEventRecord")


class AclApi(_Api):
    kind = devices.NPU
    FUNCTIONS = ("aclInit", "aclrtSetDevice", "aclrtMalloc", "aclrtFree", "aclrtMemcpyAsync",
                 "aclrtMemcpy", "aclrtCreateStream", "aclrtCreateEvent", "aclrtRecordEvent")

    def __init__(self):
        super().__init__(os.environ["FUSEOPT_ACL_LIBRARY"])
        self.lib.aclInit(None)  # first caller initialises; the backend then gets "repeat"
        self.check(self.lib.aclrtSetDevice(0), "aclrtSetDevice")

    def malloc(self, nbytes):
        p = ctypes.c_void_p()
        self.check(self.lib.aclrtMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes), 0), "aclrtMalloc")
        return p.value

    def free(self, ptr):
        self.check(self.lib.aclrtFree(ctypes.c_void_p(ptr)), "aclrtFree")

    def upload_async(self, dst, host, stream):  # 1 = ACL_MEMCPY_HOST_TO_DEVICE
        n = ctypes.c_size_t(host.nbytes)
        self.check(self.lib.aclrtMemcpyAsync(ctypes.c_void_p(dst), n,
                                             host.ctypes.data_as(ctypes.c_void_p), n, 1,
                                             ctypes.c_void_p(stream)), "aclrtMemcpyAsync")

    def download(self, host, src):  # 2 = ACL_MEMCPY_DEVICE_TO_HOST
        n = ctypes.c_size_t(host.nbytes)
        self.check(self.lib.aclrtMemcpy(host.ctypes.data_as(ctypes.c_void_p), n,
                                        ctypes.c_void_p(src), n, 2), "aclrtMemcpy")

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.lib.aclrtCreateStream(ctypes.byref(s)), "aclrtCreateStream")
        return s.value

    def event(self):
        e = ctypes.c_void_p()
        self.check(self.lib.aclrtCreateEvent(ctypes.byref(e)), "aclrtCreateEvent")
        return e.value

    def record(self, event, stream):
        self.check(self.lib.aclrtRecordEvent(ctypes.c_void_p(event), ctypes.c_void_p(stream)),
                   "aclrtRecordEvent")


class DeviceArray:
    """A device buffer shaped like a numpy array. ``produce`` uploads data on
    a producer stream without waiting (the upload stands for the kernels that
    compute a gradient), so a backend that does not wait for that stream
    reads the allocator's filler bytes instead."""

    def __init__(self, api, shape, dtype):
        self.api, self.shape, self.dtype = api, tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = api.malloc(max(self.nbytes, 1))
        self._pending = []  # host sources of uploads not yet known to be done

    def produce(self, host, stream, event=0):
        host = np.array(host, dtype=self.dtype, order="C")  # keeps 0-d arrays 0-d
        assert host.shape == self.shape
        self._pending.append(host)
        if self.nbytes:
            self.api.upload_async(self.ptr, host, stream)
        if event:
            self.api.record(event, stream)

    def get(self):
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self.api.download(out, self.ptr)
        return out

    def free(self):
        self.api.free(self.ptr)


def read_pointer(api, ptr, nbytes, dtype, shape):
    out = np.empty(shape, np.dtype(dtype))
    assert out.nbytes == nbytes, (out.nbytes, nbytes)
    if nbytes:
        api.download(out, ptr)
    return out
