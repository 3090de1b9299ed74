// xform's native XLA FFI handler for CPU: it runs a *program* (xform/_program.py) of Warp
// kernel launches on XLA's buffers, with no Python per call.
//
// A program is an array of int64 words made once per launch plan, at trace time, by
// recording what the core's Python path would launch. Per call the handler checks XLA's
// buffers against the program, patches their addresses into the recorded argument
// structs, and calls each kernel's compiled CPU entry point. Launches that the Python path
// would split over threads are spread over XLA's own CPU thread pool.
//
// Compiled at first use by Warp's bundled clang (no system compiler), freestanding: no C
// or C++ runtime beyond malloc, free, memset and memcpy, no exceptions, no threads of
// its own. Every failure is an XLA error, never a crash.
//
// It names only what XLA's FFI keeps stable from one jaxlib to the next: the call frame's
// and the API table's fields (reading a function of the table only where `struct_size`
// says it is there) and the metadata handshake. Types that jaxlib renamed are not named:
// 0.11 made the frame's `extension_start` an `XLA_FFI_InternalExtension*` (0.10: an
// `XLA_FFI_Extension_Base*`), and kept `XLA_FFI_ExecutionContext` only as an alias of
// `XLA_FFI_InvokeContext`.

#include "xla/ffi/api/c_api.h"

extern "C" {
void* malloc(size_t size);
void* calloc(size_t count, size_t size);
void free(void* pointer);
void* memset(void* destination, int value, size_t size);
void* memcpy(void* destination, const void* source, size_t size);
}

namespace {

// Keep in step with xform/_program.py.
const int64_t MAGIC = 0x786630726d0001;  // "xf0rm", format 1
enum Step : int64_t { ZERO = 1, LAUNCHES = 2, SUM = 3, FAIL = 4, CUDA_LAUNCH = 5, CUDA_ZERO = 6 };
enum Header : int64_t { H_MAGIC, H_INPUTS, H_OUTPUTS, H_SCRATCH, H_STEPS, H_WORDS, HEADER_WORDS };
const int64_t MAX_BUFFERS = 256;
const int64_t MAX_ARG_WORDS = 1024;   // 8 KiB of kernel arguments
const int64_t MAX_BOUND_WORDS = 8;
const int64_t SCRATCH_ALIGN = 64;

int64_t process_token = 0;  // set once at load; a callback from another process never matches

// Programs by key. A call names its program by a key made from what the program computes
// (the op, product, shapes, dtype, device), registered by Python when it records the
// program at trace time: an executable compiled in another process (JAX's persistent
// compilation cache) then runs this process's own program, the key being the same. One
// writer (Python, under its lock); readers see a table only once it is complete.
struct Registry {
  int64_t capacity;  // a power of two; keys[k] == 0: empty
  int64_t count;
  int64_t* keys;
  const int64_t** programs;
};
Registry* registry = nullptr;

const int64_t* registered(int64_t key) {
  Registry* table = __atomic_load_n(&registry, __ATOMIC_ACQUIRE);
  if (table == nullptr || key == 0) return nullptr;
  for (int64_t k = key & (table->capacity - 1);; k = (k + 1) & (table->capacity - 1)) {
    int64_t found = __atomic_load_n(&table->keys[k], __ATOMIC_ACQUIRE);
    if (found == key) return __atomic_load_n(&table->programs[k], __ATOMIC_ACQUIRE);
    if (found == 0) return nullptr;
  }
}

void insert(Registry* table, int64_t key, const int64_t* program) {
  int64_t k = key & (table->capacity - 1);
  while (table->keys[k] != 0 && table->keys[k] != key) k = (k + 1) & (table->capacity - 1);
  __atomic_store_n(&table->programs[k], program, __ATOMIC_RELEASE);
  if (table->keys[k] == 0) {
    __atomic_store_n(&table->keys[k], key, __ATOMIC_RELEASE);
    table->count += 1;
  }
}

Registry* made(int64_t capacity) {
  Registry* table = static_cast<Registry*>(malloc(sizeof(Registry)));
  if (table == nullptr) return nullptr;
  table->keys = static_cast<int64_t*>(malloc(capacity * sizeof(int64_t)));
  table->programs = static_cast<const int64_t**>(malloc(capacity * sizeof(int64_t*)));
  if (table->keys == nullptr || table->programs == nullptr) {
    free(table->keys);  // free(nullptr) does nothing
    free(table->programs);
    free(table);
    return nullptr;
  }
  memset(table->keys, 0, capacity * sizeof(int64_t));
  table->capacity = capacity;
  table->count = 0;
  return table;
}

typedef void (*Entry)(void* bounds, void* args);

// The frame's execution context, whatever this jaxlib calls its type.
typedef decltype(XLA_FFI_CallFrame::ctx) Context;

// One launch: [entry, patch count, bounds words..., argument words..., (offset, buffer,
// byte delta) per patch]. Every launch of a step has the same bound and argument sizes.
void run_launch(const int64_t* launch, int64_t bound_words, int64_t arg_words, char* const* bases) {
  alignas(64) int64_t bounds[MAX_BOUND_WORDS];
  alignas(64) int64_t args[MAX_ARG_WORDS];
  Entry entry = reinterpret_cast<Entry>(launch[0]);
  int64_t patches = launch[1];
  memcpy(bounds, launch + 2, bound_words * 8);
  memcpy(args, launch + 2 + bound_words, arg_words * 8);
  const int64_t* patch = launch + 2 + bound_words + arg_words;
  for (int64_t k = 0; k < patches; ++k, patch += 3) {
    char* address = bases[patch[1]] + patch[2];
    memcpy(reinterpret_cast<char*>(args) + patch[0], &address, sizeof(address));
  }
  entry(bounds, args);
}

// The launches of one step, claimed one at a time by the calling thread and by tasks on
// XLA's pool. It lives on the heap: a task may start after the call has returned (it then
// finds nothing to claim), and the last of caller and tasks to let go of it frees it.
struct Shared {
  const int64_t* program;
  const int64_t* offsets;  // each launch's first word
  int64_t count, bound_words, arg_words;
  char* bases[MAX_BUFFERS];
  int64_t next, done, references;
};

void claim_launches(Shared* shared) {
  for (;;) {
    int64_t k = __atomic_fetch_add(&shared->next, 1, __ATOMIC_ACQ_REL);
    if (k >= shared->count) return;
    run_launch(shared->program + shared->offsets[k], shared->bound_words, shared->arg_words,
               shared->bases);
    __atomic_fetch_add(&shared->done, 1, __ATOMIC_RELEASE);
  }
}

void release(Shared* shared) {
  if (__atomic_sub_fetch(&shared->references, 1, __ATOMIC_ACQ_REL) == 0) free(shared);
}

void task(void* data) {
  Shared* shared = static_cast<Shared*>(data);
  claim_launches(shared);
  release(shared);
}

bool has_thread_pool(const XLA_FFI_Api* api) {
  // Older jaxlibs pass a shorter table.
  return api != nullptr &&
         api->struct_size >= offsetof(XLA_FFI_Api, XLA_FFI_ThreadPool_NumThreads) + sizeof(void*) &&
         api->XLA_FFI_ThreadPool_Schedule != nullptr &&
         api->XLA_FFI_ThreadPool_NumThreads != nullptr;
}

int64_t pool_threads(const XLA_FFI_Api* api, Context context) {
  int64_t threads = 0;
  XLA_FFI_ThreadPool_NumThreads_Args args;
  memset(&args, 0, sizeof(args));
  args.struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE;
  args.ctx = context;
  args.num_threads = &threads;
  XLA_FFI_Error* error = api->XLA_FFI_ThreadPool_NumThreads(&args);
  if (error != nullptr) {
    XLA_FFI_Error_Destroy_Args destroy;
    memset(&destroy, 0, sizeof(destroy));
    destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    destroy.error = error;
    api->XLA_FFI_Error_Destroy(&destroy);
    return 0;
  }
  return threads;
}

// Runs one LAUNCHES step; returns a message on failure, or nullptr.
const char* run_launches(const int64_t* program, const int64_t* step, char* const* bases,
                         int64_t buffers, const XLA_FFI_Api* api,
                         Context context) {
  int64_t count = step[2], parallel = step[3], bound_words = step[4], arg_words = step[5];
  const int64_t* offsets = step + 6;
  if (bound_words > MAX_BOUND_WORDS || arg_words > MAX_ARG_WORDS)
    return "xform native: a launch's arguments exceed the handler's limits";
  int64_t helpers = 0;
  if (parallel && count > 1 && context != nullptr && has_thread_pool(api)) {
    helpers = pool_threads(api, context);
    if (helpers > count - 1) helpers = count - 1;
  }
  if (helpers <= 0) {
    for (int64_t k = 0; k < count; ++k)
      run_launch(program + offsets[k], bound_words, arg_words, bases);
    return nullptr;
  }
  Shared* shared = static_cast<Shared*>(malloc(sizeof(Shared)));
  if (shared == nullptr) return "xform native: out of memory";
  shared->program = program;
  shared->offsets = offsets;
  shared->count = count;
  shared->bound_words = bound_words;
  shared->arg_words = arg_words;
  memcpy(shared->bases, bases, buffers * sizeof(char*));
  shared->next = 0;
  shared->done = 0;
  shared->references = 1 + helpers;
  for (int64_t k = 0; k < helpers; ++k) {
    XLA_FFI_ThreadPool_Schedule_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
    args.ctx = context;
    args.task = task;
    args.data = shared;
    XLA_FFI_Error* error = api->XLA_FFI_ThreadPool_Schedule(&args);
    if (error != nullptr) {  // no pool after all: this thread does the rest
      XLA_FFI_Error_Destroy_Args destroy;
      memset(&destroy, 0, sizeof(destroy));
      destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      destroy.error = error;
      api->XLA_FFI_Error_Destroy(&destroy);
      __atomic_sub_fetch(&shared->references, helpers - k, __ATOMIC_ACQ_REL);
      break;
    }
  }
  claim_launches(shared);
  // Launches claimed by tasks are running: wait for them to finish writing.
  while (__atomic_load_n(&shared->done, __ATOMIC_ACQUIRE) < count) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();  // leave the core's pipeline to the thread being waited for
#endif
  }
  release(shared);
  return nullptr;
}

template <typename Scalar>
void sum_parts(Scalar* total, const Scalar* parts, int64_t tiles, int64_t stride, int64_t count) {
  // Tile after tile, as the Python path adds them (`_launch._PartialSums`): bit for bit.
  for (int64_t i = 0; i < count; ++i) {
    Scalar sum = parts[i];
    for (int64_t t = 1; t < tiles; ++t) sum += parts[t * stride + i];
    total[i] = sum;
  }
}

// --- CUDA: the same programs, launched on XLA's stream ------------------------------------
// (Written for a GPU and not yet run on one: `jax_native.py` keeps the Python function
// behind the guard below as the CUDA path unless XFORM_JAX_CUDA=native.)

// Warp's wp_cuda_launch_kernel: nonzero on failure.
typedef size_t (*CudaLaunch)(void* context, void* kernel, size_t size, int max_blocks,
                             int block_dim, int grid_stride, int cluster_dim, int shared_bytes,
                             void** params, void* stream, void* apic);
// The driver's cuMemsetD8Async, cuCtxPushCurrent_v2 and cuCtxPopCurrent_v2: nonzero on
// failure. The memset needs a current context, which XLA's thread may not have.
typedef int (*CudaMemset)(uint64_t destination, unsigned char value, size_t size, void* stream);
typedef int (*CudaPush)(void* context);
typedef int (*CudaPop)(void** context);

// [CUDA_LAUNCH, words, launcher, context, function, size, max blocks, block dim, grid
//  stride, cluster dim, shared bytes, params, blob words, patches, param offsets...,
//  blob..., (offset, buffer, delta) per patch]: each kernel parameter is a piece of the
// blob, and Warp's launcher takes an array of their addresses.
const char* run_cuda_launch(const int64_t* step, char* const* bases, void* stream) {
  int64_t params = step[11], blob_words = step[12], patches = step[13];
  if (params > 64 || blob_words > MAX_ARG_WORDS) return "xform native: a CUDA launch exceeds the handler's limits";
  alignas(64) int64_t blob[MAX_ARG_WORDS];
  void* addresses[64];
  const int64_t* offsets = step + 14;
  memcpy(blob, offsets + params, blob_words * 8);
  const int64_t* patch = offsets + params + blob_words;
  for (int64_t k = 0; k < patches; ++k, patch += 3) {
    char* address = bases[patch[1]] + patch[2];
    memcpy(reinterpret_cast<char*>(blob) + patch[0], &address, sizeof(address));
  }
  for (int64_t k = 0; k < params; ++k) addresses[k] = reinterpret_cast<char*>(blob) + offsets[k];
  CudaLaunch launch = reinterpret_cast<CudaLaunch>(step[2]);
  size_t failed = launch(reinterpret_cast<void*>(step[3]), reinterpret_cast<void*>(step[4]),
                         static_cast<size_t>(step[5]), static_cast<int>(step[6]),
                         static_cast<int>(step[7]), static_cast<int>(step[8]),
                         static_cast<int>(step[9]), static_cast<int>(step[10]), addresses, stream,
                         nullptr);
  return failed ? "xform native: a CUDA kernel launch failed" : nullptr;
}

}  // namespace

extern "C" {

void xform_native_set_token(int64_t token) { process_token = token; }

// Registers `program` under `key` (nonzero), in place of any program before it; returns
// false where memory ran out. A table outgrown is copied into one twice its size, then
// published; the old one stays allocated for the readers still in it.
bool xform_native_register(int64_t key, const int64_t* program) {
  Registry* table = registry;
  if (table == nullptr || 2 * (table->count + 1) > table->capacity) {
    Registry* larger = made(table == nullptr ? 1024 : 2 * table->capacity);
    if (larger == nullptr) return false;
    for (int64_t k = 0; table != nullptr && k < table->capacity; ++k)
      if (table->keys[k] != 0) insert(larger, table->keys[k], table->programs[k]);
    __atomic_store_n(&registry, larger, __ATOMIC_RELEASE);
    table = larger;
  }
  insert(table, key, program);
  return true;
}

// Runs `program` on `bases` (inputs, outputs, then the scratch buffers it allocates).
// `api` and `context` may be null: then everything runs on the calling thread.
const char* xform_native_run(const int64_t* program, char** bases, int64_t given,
                             const XLA_FFI_Api* api, Context context) {
  if (program[H_MAGIC] != MAGIC) return "xform native: not a program of this format";
  int64_t inputs = program[H_INPUTS], outputs = program[H_OUTPUTS];
  int64_t scratch = program[H_SCRATCH], steps = program[H_STEPS];
  int64_t buffers = inputs + outputs + scratch;
  if (given != inputs + outputs) return "xform native: wrong number of buffers";
  if (buffers > MAX_BUFFERS) return "xform native: too many buffers";
  const int64_t* scratch_bytes = program + HEADER_WORDS + inputs + outputs;
  int64_t total = 0;
  for (int64_t k = 0; k < scratch; ++k)
    total += (scratch_bytes[k] + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
  char* memory = nullptr;
  if (total > 0) {
    memory = static_cast<char*>(calloc(1, total));  // partial sums start at zero
    if (memory == nullptr) return "xform native: out of memory for scratch";
  }
  char* all[MAX_BUFFERS];
  memcpy(all, bases, given * sizeof(char*));
  char* next = memory;
  for (int64_t k = 0; k < scratch; ++k) {
    all[given + k] = next;
    next += (scratch_bytes[k] + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
  }
  const char* failure = nullptr;
  const int64_t* step = program + HEADER_WORDS + buffers;
  for (int64_t s = 0; s < steps && failure == nullptr; ++s, step += step[1]) {
    switch (step[0]) {
      case ZERO:  // [ZERO, words, buffer, byte offset, bytes]
        memset(all[step[2]] + step[3], 0, step[4]);
        break;
      case LAUNCHES:
        failure = run_launches(program, step, all, buffers, api, context);
        break;
      case SUM: {  // [SUM, words, total, offset, parts, offset, tiles, stride, count, itemsize]
        char* total = all[step[2]] + step[3];
        const char* parts = all[step[4]] + step[5];
        if (step[9] == 8)
          sum_parts(reinterpret_cast<double*>(total), reinterpret_cast<const double*>(parts),
                    step[6], step[7], step[8]);
        else
          sum_parts(reinterpret_cast<float*>(total), reinterpret_cast<const float*>(parts),
                    step[6], step[7], step[8]);
        break;
      }
      case FAIL:
        failure = "xform native: a program's FAIL step (the error path's test)";
        break;
      case CUDA_LAUNCH:
      case CUDA_ZERO:
        failure = "xform native: a CUDA program called on CPU";
        break;
      default:
        failure = "xform native: unknown step";
    }
  }
  free(memory);
  return failure;
}

static XLA_FFI_Error* error(const XLA_FFI_Api* api, const char* message,
                            XLA_FFI_Error_Code code = XLA_FFI_Error_Code_INTERNAL) {
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof(args));
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message;
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

static bool attribute(const XLA_FFI_Attrs& attrs, const char* name, int64_t* value) {
  for (int64_t k = 0; k < attrs.size; ++k) {
    const XLA_FFI_ByteSpan* key = attrs.names[k];
    size_t n = 0;
    while (name[n] != 0) ++n;
    if (key->len != n || attrs.types[k] != XLA_FFI_AttrType_SCALAR) continue;
    bool same = true;
    for (size_t i = 0; i < n; ++i) same = same && key->ptr[i] == name[i];
    const XLA_FFI_Scalar* scalar = static_cast<const XLA_FFI_Scalar*>(attrs.attrs[k]);
    if (same && scalar->dtype == XLA_FFI_DataType_S64) {
      *value = *static_cast<const int64_t*>(scalar->value);
      return true;
    }
  }
  return false;
}

static int64_t buffer_bytes(const XLA_FFI_Buffer* buffer) {
  int64_t size = buffer->dtype == XLA_FFI_DataType_F64 ? 8
                 : buffer->dtype == XLA_FFI_DataType_F32 ? 4 : -1;
  if (size < 0) return -1;
  for (int64_t d = 0; d < buffer->rank; ++d) size *= buffer->dims[d];
  return size;
}

// What both handlers read off a call frame: the program (attribute `program`, its key in
// the registry) and XLA's buffers, checked against the program.
struct Call {
  const int64_t* program;
  int64_t buffers;
  char* bases[MAX_BUFFERS];
};

// XLA's first call of a handler asks for the FFI version it was built against: answers it
// (as XLA's own C++ API does) and returns true.
static bool answered_metadata(XLA_FFI_CallFrame* frame) {
  const auto* extension = frame->extension_start;
  if (extension == nullptr || extension->type != XLA_FFI_Extension_Metadata) return false;
  XLA_FFI_Metadata* metadata =
      reinterpret_cast<const XLA_FFI_Metadata_Extension*>(extension)->metadata;
  metadata->api_version.major_version = XLA_FFI_API_MAJOR;
  metadata->api_version.minor_version = XLA_FFI_API_MINOR;
  return true;
}

// The address in the call's attribute `name`, vouched for by its attribute `token`: this
// process's, or the address is not to be followed.
static const char* address_attribute(XLA_FFI_CallFrame* frame, const char* name,
                                     int64_t* address) {
  int64_t token = 0;
  if (!attribute(frame->attrs, name, address) || !attribute(frame->attrs, "token", &token))
    return "xform native: the call has no address of its work";
  if (token != process_token || process_token == 0)
    return "xform native: this call was made in another process (a persistent "
           "compilation cache?); set XFORM_JAX_CPU=callback (XFORM_JAX_CUDA on a GPU)";
  return nullptr;
}

// Returns nullptr once `call` is filled (or the metadata query answered: then
// `call->program` stays null), else an error message.
static const char* read_call(XLA_FFI_CallFrame* frame, Call* call) {
  call->program = nullptr;
  if (answered_metadata(frame)) return nullptr;
  int64_t key = 0;
  if (!attribute(frame->attrs, "program", &key))
    return "xform native: the call names no program";
  const int64_t* program = registered(key);
  if (program == nullptr)
    return "xform native: the call's program was never recorded in this process";
  int64_t inputs = program[H_INPUTS], outputs = program[H_OUTPUTS];
  if (frame->args.size != inputs || frame->rets.size != outputs || inputs + outputs > MAX_BUFFERS)
    return "xform native: the call's buffers do not match its program";
  const int64_t* expected = program + HEADER_WORDS;
  for (int64_t k = 0; k < inputs + outputs; ++k) {
    const XLA_FFI_Buffer* buffer = static_cast<const XLA_FFI_Buffer*>(
        k < inputs ? frame->args.args[k] : frame->rets.rets[k - inputs]);
    if (buffer_bytes(buffer) != expected[k])
      return "xform native: a buffer's size does not match its program";
    call->bases[k] = static_cast<char*>(buffer->data);
  }
  call->buffers = inputs + outputs;
  call->program = program;
  return nullptr;
}

// The CPU handler.
XLA_FFI_Error* xform_native_execute(XLA_FFI_CallFrame* frame) {
  Call call;
  const char* failure = read_call(frame, &call);
  if (failure == nullptr && call.program != nullptr)
    failure = xform_native_run(call.program, call.bases, call.buffers, frame->api, frame->ctx);
  return failure == nullptr ? nullptr : error(frame->api, failure);
}

// Runs a CUDA program (no scratch: XLA passes every buffer) on `stream`.
const char* xform_native_run_cuda(const int64_t* program, char** bases, int64_t given,
                                  void* stream) {
  if (program[H_MAGIC] != MAGIC) return "xform native: not a program of this format";
  if (given != program[H_INPUTS] + program[H_OUTPUTS] || program[H_SCRATCH] != 0)
    return "xform native: the CUDA program's buffers do not match";
  const int64_t* step = program + HEADER_WORDS + given;
  const char* failure = nullptr;
  for (int64_t s = 0; s < program[H_STEPS] && failure == nullptr; ++s, step += step[1]) {
    if (step[0] == CUDA_LAUNCH) {
      failure = run_cuda_launch(step, bases, stream);
    } else if (step[0] == CUDA_ZERO) {
      // [CUDA_ZERO, words, memset, push, pop, context, buffer, offset, bytes]
      CudaMemset memset_async = reinterpret_cast<CudaMemset>(step[2]);
      CudaPush push = reinterpret_cast<CudaPush>(step[3]);
      CudaPop pop = reinterpret_cast<CudaPop>(step[4]);
      uint64_t address = reinterpret_cast<uint64_t>(bases[step[6]] + step[7]);
      if (push(reinterpret_cast<void*>(step[5])) != 0) {
        failure = "xform native: could not make the CUDA context current";
      } else {
        if (memset_async(address, 0, static_cast<size_t>(step[8]), stream) != 0)
          failure = "xform native: a CUDA memset failed";
        void* popped = nullptr;
        pop(&popped);
      }
    } else {
      failure = step[0] == FAIL ? "xform native: a program's FAIL step (the error path's test)"
                                : "xform native: a CPU step in a CUDA program";
    }
  }
  return failure;
}

// XLA's stream for this call, and the ordinal of its device (-1 where this jaxlib's API
// cannot say).
static XLA_FFI_Error* cuda_stream(XLA_FFI_CallFrame* frame, void** stream, int64_t* device) {
  const XLA_FFI_Api* api = frame->api;
  XLA_FFI_Stream_Get_Args get;
  memset(&get, 0, sizeof(get));
  get.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
  get.ctx = frame->ctx;
  XLA_FFI_Error* failed = api->XLA_FFI_Stream_Get(&get);
  if (failed != nullptr) return failed;
  *stream = get.stream;
  *device = -1;
  XLA_FFI_DeviceOrdinal_Get_Args ordinal;
  memset(&ordinal, 0, sizeof(ordinal));
  ordinal.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
  ordinal.ctx = frame->ctx;
  bool has_ordinal = api->struct_size >= offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) +
                                             sizeof(void*) &&
                     api->XLA_FFI_DeviceOrdinal_Get != nullptr;
  if (!has_ordinal) return nullptr;
  failed = api->XLA_FFI_DeviceOrdinal_Get(&ordinal);
  if (failed == nullptr) *device = ordinal.device_ordinal;
  return failed;
}

// The CUDA handler: the program's launches on XLA's stream.
XLA_FFI_Error* xform_native_execute_cuda(XLA_FFI_CallFrame* frame) {
  const XLA_FFI_Api* api = frame->api;
  Call call;
  const char* failure = read_call(frame, &call);
  if (failure != nullptr) return error(api, failure);
  if (call.program == nullptr) return nullptr;
  void* stream = nullptr;
  int64_t device = -1;
  XLA_FFI_Error* failed = cuda_stream(frame, &stream, &device);
  if (failed != nullptr) return failed;
  // The program's kernels and context are the recording device's (cuda:0).
  if (device > 0)
    return error(api, "xform native: CUDA programs run on device 0 only; set "
                      "XFORM_JAX_CUDA=callback");
  failure = xform_native_run_cuda(call.program, call.bases, call.buffers, stream);
  return failure == nullptr ? nullptr : error(api, failure);
}

#include "jax_native_guard.h"

}  // extern "C"
