// The Python callback behind a guard: the FFI handlers of jax_native.cpp's Python route,
// included by it inside its extern "C" block (a file of its own to keep each short).

// --- the Python callback, behind a guard ---------------------------------------------------
// Where no program runs a product (none can be recorded, or none is wanted), a Python
// function does. Called by XLA straight through ctypes, it could not catch an exception
// raised at its own first instruction, which is where a Ctrl-C that arrived while XLA ran
// on the main thread lands (jaxlib 0.11 on): ctypes then reports it as "ignored" and hands
// XLA whatever its return register held, success or a wild pointer, over outputs never
// written. So XLA calls these handlers, which call the Python function (attribute
// `callback`) with an outcome that only its last step sets: whatever escapes it leaves the
// outcome unset, and the call fails with CANCELLED. Nothing partial is ever returned.

// One XLA buffer, as the Python function reads it.
struct PythonBuffer {
  void* data;
  int64_t dtype;  // an XLA_FFI_DataType
  int64_t rank;
  const int64_t* dims;
};

// Sets outcome[0] last: 1 once done, 2 on an error (outcome[1] its XLA_FFI_Error_Code,
// `message` its text). `device` is the CUDA device's ordinal, or -1 on CPU.
typedef void (*PythonFunction)(const PythonBuffer* buffers, int64_t inputs, int64_t outputs,
                               void* stream, int64_t device, char* message, int64_t capacity,
                               int64_t* outcome);

const int64_t MESSAGE_BYTES = 2048;

static XLA_FFI_Error* call_python(XLA_FFI_CallFrame* frame, void* stream, int64_t device) {
  const XLA_FFI_Api* api = frame->api;
  int64_t address = 0;
  const char* failure = address_attribute(frame, "callback", &address);
  if (failure != nullptr) return error(api, failure);
  int64_t inputs = frame->args.size, outputs = frame->rets.size;
  if (inputs + outputs > MAX_BUFFERS) return error(api, "xform: too many buffers");
  PythonBuffer buffers[MAX_BUFFERS];
  for (int64_t k = 0; k < inputs + outputs; ++k) {
    const XLA_FFI_Buffer* buffer = static_cast<const XLA_FFI_Buffer*>(
        k < inputs ? frame->args.args[k] : frame->rets.rets[k - inputs]);
    buffers[k].data = buffer->data;
    buffers[k].dtype = buffer->dtype;
    buffers[k].rank = buffer->rank;
    buffers[k].dims = buffer->dims;
  }
  char message[MESSAGE_BYTES];
  message[0] = 0;
  int64_t outcome[2] = {0, 0};
  reinterpret_cast<PythonFunction>(address)(buffers, inputs, outputs, stream, device, message,
                                            MESSAGE_BYTES, outcome);
  if (outcome[0] == 1) return nullptr;
  if (outcome[0] == 2) {
    message[MESSAGE_BYTES - 1] = 0;
    return error(api, message, static_cast<XLA_FFI_Error_Code>(outcome[1]));
  }
  return error(api,
               "xform: the Python FFI callback did not finish: an exception escaped it (a "
               "KeyboardInterrupt at its first instruction, say), so the call has no result",
               XLA_FFI_Error_Code_CANCELLED);
}

XLA_FFI_Error* xform_python_execute(XLA_FFI_CallFrame* frame) {
  if (answered_metadata(frame)) return nullptr;
  return call_python(frame, nullptr, -1);
}

XLA_FFI_Error* xform_python_execute_cuda(XLA_FFI_CallFrame* frame) {
  if (answered_metadata(frame)) return nullptr;
  void* stream = nullptr;
  int64_t device = -1;
  XLA_FFI_Error* failed = cuda_stream(frame, &stream, &device);
  if (failed != nullptr) return failed;
  return call_python(frame, stream, device < 0 ? 0 : device);  // an old jaxlib: device 0
}
