/* LD_PRELOAD shim for the bundled llama-server, used by bench/planner.py --moe to read llama.cpp's
 * own `--fit` choice without a GPU of the size asked about.
 *
 * 1. ggml_backend_dev_memory: a GPU-type device (the RPC device the bench connects to) reports
 *    VRAMPILOT_FIT_DEVICE_BYTES as its free and total memory, so that common_fit_params
 *    (common/fit.cpp) fits to that budget. Calls from libllama-common into libggml-base go through
 *    the PLT, so the preloaded definition wins.
 * 2. common_fit_params: runs llama.cpp's own fit, prints what it chose (status, n_gpu_layers,
 *    n_ctx, each tensor override pattern and its buffer type) on stderr, drains llama.cpp's log,
 *    then exits before the real load would read the weights (the file's data is a hole).
 *
 * Layouts read here are llama.h's (0.3.36's vendored llama.cpp): llama_model_params starts with
 * the devices pointer, the tensor_buft_overrides pointer and int32 n_gpu_layers;
 * llama_context_params starts with uint32 n_ctx; an override is {const char *pattern; buft}.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct override { const char *pattern; void *buft; };
struct model_params_head { void **devices; const struct override *tensor_buft_overrides; int32_t n_gpu_layers; };

void ggml_backend_dev_memory(void *dev, size_t *free_bytes, size_t *total_bytes) {
    static void (*real)(void *, size_t *, size_t *);
    static int (*dev_type)(void *);
    if (!real) {
        real = (void (*)(void *, size_t *, size_t *))dlsym(RTLD_NEXT, "ggml_backend_dev_memory");
        dev_type = (int (*)(void *))dlsym(RTLD_NEXT, "ggml_backend_dev_type");
    }
    real(dev, free_bytes, total_bytes);
    const char *budget = getenv("VRAMPILOT_FIT_DEVICE_BYTES");
    if (budget && dev_type && dev_type(dev) == 1 /* GGML_BACKEND_DEVICE_TYPE_GPU */) {
        *free_bytes = *total_bytes = strtoull(budget, NULL, 10);
    }
}

typedef int (*fit_fn)(const char *, void *, void *, float *, void *, size_t *, uint32_t, const void *, int);

/* enum common_params_fit_status common_fit_params(const char *, llama_model_params *,
 *     llama_context_params *, float *, llama_model_tensor_buft_override *, size_t *, uint32_t,
 *     const common_fit_extra_model *, ggml_log_level) */
int _Z17common_fit_paramsPKcP18llama_model_paramsP20llama_context_paramsPfP32llama_model_tensor_buft_overridePmjPK22common_fit_extra_model14ggml_log_level(
    const char *path, void *mparams, void *cparams, float *split, void *overrides, size_t *margins,
    uint32_t n_ctx_min, const void *extra, int level) {
    fit_fn real = (fit_fn)dlsym(RTLD_NEXT, __func__);
    const char *(*buft_name)(void *) = (const char *(*)(void *))dlsym(RTLD_DEFAULT, "ggml_backend_buft_name");
    int status = real(path, mparams, cparams, split, overrides, margins, n_ctx_min, extra, level);
    /* llama.cpp logs through a worker thread: drain its queue first (common_log_pause joins the
     * worker once it has written everything queued), so that the fit's own lines are complete and
     * nothing of it lands in the middle of the lines below. */
    void *(*log_main)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "_Z15common_log_mainv");
    void (*log_pause)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_Z16common_log_pauseP10common_log");
    if (log_main && log_pause) {
        log_pause(log_main());
    }
    fflush(NULL);
    const struct model_params_head *m = (const struct model_params_head *)mparams;
    fprintf(stderr, "\nVRAMPILOT_FIT status=%d n_gpu_layers=%d n_ctx=%u\n", status, m->n_gpu_layers,
            *(const uint32_t *)cparams);
    for (const struct override *o = m->tensor_buft_overrides; o && o->pattern; o++) {
        fprintf(stderr, "VRAMPILOT_FIT override %s=%s\n", o->pattern, buft_name && o->buft ? buft_name(o->buft) : "?");
    }
    fprintf(stderr, "VRAMPILOT_FIT end\n");
    fflush(NULL);
    _exit(0);
}
