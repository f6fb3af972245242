/*
 * cudnn-rs driver stub: a shared object with SONAME libcuda.so.1 that lets
 * cuDNN's graph API *plan* on a machine with no NVIDIA driver.
 *
 * cuDNN's engine sub-libraries link libcuda.so.1, so without a driver every
 * backend finalize fails to load them. This stub is loaded by the `cudnn`
 * crate only when no real libcuda.so.1 can be opened. It does exactly this:
 *
 *  - reports a driver version (13.0) and zero devices;
 *  - "loads" modules, libraries and kernels by handing back distinct dummy
 *    handles, so engines that compile their kernels at run time can finish
 *    building a plan (the compiled code is kept in the plan's JSON);
 *  - answers every launch, memory, context and initialisation call with
 *    CUDA_ERROR_STUB_LIBRARY (34), so nothing can ever execute through it.
 *
 * No code here computes anything; executing a plan needs a real GPU.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_STUB_LIBRARY 34

static char dummy_objects[64];
/* Atomic: threads plan (and so load modules) at the same time. */
static atomic_size_t next_dummy = 0;

static void *dummy(void) {
    /* Distinct, non-null, never dereferenced by the caller's use of them
     * here (every call that would use one fails or is a no-op). */
    size_t i = atomic_fetch_add_explicit(&next_dummy, 1, memory_order_relaxed);
    return &dummy_objects[i % sizeof dummy_objects];
}

#define STUB_FAIL(name) \
    CUresult name() { return CUDA_ERROR_STUB_LIBRARY; }

CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = e == CUDA_ERROR_STUB_LIBRARY
             ? "cudnn-rs driver stub: no NVIDIA driver on this machine (planning only)"
             : "cudnn-rs driver stub: error";
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = e == CUDA_ERROR_STUB_LIBRARY ? "CUDA_ERROR_STUB_LIBRARY" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(void **ctx) {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = NULL;
    return CUDA_SUCCESS;
}

/* Loading code: accepted, with dummy handles. */
CUresult cuModuleLoadData(void **module, const void *image) {
    (void)image;
    if (!module) return CUDA_ERROR_INVALID_VALUE;
    *module = dummy();
    return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    (void)module; (void)name;
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    *f = dummy();
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(void *module) { (void)module; return CUDA_SUCCESS; }

CUresult cuLibraryLoadData(void **library, const void *code, void *jit_options,
                           void **jit_values, unsigned n_jit, void *lib_options,
                           void **lib_values, unsigned n_lib) {
    (void)code; (void)jit_options; (void)jit_values; (void)n_jit;
    (void)lib_options; (void)lib_values; (void)n_lib;
    if (!library) return CUDA_ERROR_INVALID_VALUE;
    *library = dummy();
    return CUDA_SUCCESS;
}
CUresult cuLibraryLoadFromFile(void **library, const char *file, void *jit_options,
                               void **jit_values, unsigned n_jit, void *lib_options,
                               void **lib_values, unsigned n_lib) {
    (void)file; (void)jit_options; (void)jit_values; (void)n_jit;
    (void)lib_options; (void)lib_values; (void)n_lib;
    if (!library) return CUDA_ERROR_INVALID_VALUE;
    *library = dummy();
    return CUDA_SUCCESS;
}
CUresult cuLibraryGetKernel(void **kernel, void *library, const char *name) {
    (void)library; (void)name;
    if (!kernel) return CUDA_ERROR_INVALID_VALUE;
    *kernel = dummy();
    return CUDA_SUCCESS;
}
CUresult cuLibraryUnload(void *library) { (void)library; return CUDA_SUCCESS; }
CUresult cuKernelGetFunction(void **f, void *kernel) {
    (void)kernel;
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    *f = dummy();
    return CUDA_SUCCESS;
}

/* Everything that would touch a device, a context or memory: refused. */
STUB_FAIL(cuInit)
STUB_FAIL(cuDeviceGet)
STUB_FAIL(cuCtxGetLimit)
STUB_FAIL(cuCtxPopCurrent)
STUB_FAIL(cuCtxPushCurrent)
STUB_FAIL(cuKernelGetAttribute)
STUB_FAIL(cuKernelSetAttribute)
STUB_FAIL(cuLaunchCooperativeKernel)
STUB_FAIL(cuLaunchKernel)
STUB_FAIL(cuLaunchKernelEx)
STUB_FAIL(cuLinkAddData)
STUB_FAIL(cuLinkComplete)
STUB_FAIL(cuLinkCreate)
STUB_FAIL(cuLinkDestroy)
STUB_FAIL(cuOccupancyMaxPotentialClusterSize)
STUB_FAIL(cuStreamGetCtx)
STUB_FAIL(cuTensorMapEncodeIm2col)
STUB_FAIL(cuTensorMapEncodeTiled)
STUB_FAIL(cuGetProcAddress)
STUB_FAIL(cuGetProcAddress_v2)

/* Lets the crate recognise the stub. */
const char *cudnn_rs_driver_stub(void) { return "cudnn-rs driver stub 1"; }
