// The eager hot path of the `neuron` device (DESIGN 10): device memory and the PrivateUse1
// kernel that serves a cached executable without entering Python code of ours.
//
// Memory: each storage is a unique fake address mapped to an Allocation holding its flat
// jax.Array (or None until first written). A storage made here carries a DataPtr whose deleter
// queues its address; the queue is reaped under the GIL (freeing the bytes, retiring the buffer
// until it is computed), so a storage can die on any thread without Python.
//
// Kernel: one boxed function serves every neuron op. Per op, Python says once what its kernel
// is (`describe`): a lowering kernel, whose calls this module keys; a metadata-only kernel,
// redispatched to the CPU kernel here; or anything else, always run in Python. A keyed call
// whose key has an entry launches its executable and makes its outputs here. Any other call
// runs the Python dispatcher; a lowering kernel then `remember`s its executable under the key
// computed here, so the next such call hits. Everything runs holding the GIL.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

constexpr uint64_t kBase = 0x100000000000ULL;
constexpr uint64_t kAlign = 512;
constexpr size_t kPruneCount = 64;
constexpr int64_t kPruneBytes = 64LL << 20;
const c10::Device kDevice(c10::DeviceType::PrivateUse1, 0);

py::object dtype_object(c10::ScalarType t) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t)));
}

c10::ScalarType scalar_type_of(const py::handle& dtype) {
  if (dtype.is_none()) return c10::ScalarType::Undefined;
  TORCH_CHECK(THPDtype_Check(dtype.ptr()), "neuron: expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

// ---- device memory ------------------------------------------------------------------------

struct Allocation {
  py::object buffer = py::none();  // flat jax.Array, or None while never written
  int64_t nbytes = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // of the buffer's elements
};

struct Stats {
  int64_t allocated = 0, peak = 0, num_alloc = 0, num_free = 0, num_ooms = 0;
};

class Memory {
 public:
  Memory(int64_t capacity, bool async_dispatch) : capacity(capacity), async_dispatch_(async_dispatch) {}

  std::pair<uint64_t, std::shared_ptr<Allocation>> allocate(int64_t nbytes, py::object buffer, c10::ScalarType dtype) {
    reap();
    prune_retired();
    if (stats.allocated + nbytes > capacity) {
      stats.num_ooms += 1;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron: out of memory allocating ", mib(nbytes), " (",
                       mib(stats.allocated), " of ", mib(capacity),
                       " in use). Free tensors, use smaller batches, or raise TORCH_NEURONX_MEMORY_GB.");
    }
    stats.allocated += nbytes;
    stats.num_alloc += 1;
    stats.peak = std::max(stats.peak, stats.allocated);
    uint64_t addr = next_;
    next_ += std::max<uint64_t>(kAlign, (static_cast<uint64_t>(nbytes) + kAlign - 1) / kAlign * kAlign);
    auto alloc = std::make_shared<Allocation>();
    alloc->buffer = std::move(buffer);
    alloc->nbytes = nbytes;
    alloc->dtype = dtype;
    table.emplace(addr, alloc);
    return {addr, alloc};
  }

  // Any thread, GIL or not: the storage at `addr` died.
  void release(uint64_t addr) {
    std::lock_guard<std::mutex> lock(dead_mutex_);
    dead_.push_back(addr);
    has_dead_.store(true, std::memory_order_release);
  }

  // GIL held: free the storages that died since the last reap.
  void reap() {
    if (!has_dead_.load(std::memory_order_acquire)) return;
    std::vector<uint64_t> dead;
    {
      std::lock_guard<std::mutex> lock(dead_mutex_);
      dead.swap(dead_);
      has_dead_.store(false, std::memory_order_release);
    }
    for (uint64_t addr : dead) {
      auto it = table.find(addr);
      if (it == table.end()) continue;
      auto alloc = std::move(it->second);
      table.erase(it);
      stats.allocated -= alloc->nbytes;
      stats.num_free += 1;
      if (async_dispatch_ && !alloc->buffer.is_none() && !computed(alloc->buffer)) {
        retired_bytes_ += alloc->nbytes;
        retired_.emplace_back(std::move(alloc->buffer), alloc->nbytes);
      }
    }
  }

  // Dead storages' buffers are kept until computed: a result dropped at once may still be in
  // flight, and synchronize() must wait for it too. Finished ones go once _PRUNE_COUNT more
  // buffers or _PRUNE_BYTES more bytes than the last prune kept are retired.
  void prune_retired() {
    if (retired_.size() < prune_count_ && retired_bytes_ < prune_bytes_) return;
    std::vector<std::pair<py::object, int64_t>> kept;
    int64_t bytes = 0;
    for (auto& [buffer, n] : retired_) {
      if (computed(buffer)) continue;
      bytes += n;
      kept.emplace_back(std::move(buffer), n);
    }
    retired_.swap(kept);
    retired_bytes_ = bytes;
    prune_count_ = retired_.size() + kPruneCount;
    prune_bytes_ = retired_bytes_ + kPruneBytes;
  }

  py::list in_flight() {
    reap();
    py::list found;
    for (auto& [addr, alloc] : table)
      if (!alloc->buffer.is_none() && !alloc->buffer.attr("is_deleted")().cast<bool>()) found.append(alloc->buffer);
    for (auto& [buffer, n] : retired_)
      if (!buffer.attr("is_deleted")().cast<bool>()) found.append(buffer);
    retired_.clear();
    retired_bytes_ = 0;
    prune_count_ = kPruneCount;
    prune_bytes_ = kPruneBytes;
    return found;
  }

  py::list retired() const {
    py::list found;
    for (auto& [buffer, n] : retired_) found.append(py::make_tuple(buffer, n));
    return found;
  }

  std::shared_ptr<Allocation> find(uint64_t addr) {
    auto it = table.find(addr);
    return it == table.end() ? nullptr : it->second;
  }

  Stats stats;
  int64_t capacity;
  std::unordered_map<uint64_t, std::shared_ptr<Allocation>> table;

 private:
  static std::string mib(int64_t n) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(n) / (1 << 20));
    return text;
  }

  uint64_t next_ = kBase;
  // Whether a buffer's work is done (or it was donated away): nothing to wait for.
  static bool computed(const py::object& buffer) {
    static PyObject* names[2] = {PyUnicode_InternFromString("is_deleted"), PyUnicode_InternFromString("is_ready")};
    for (PyObject* name : names) {
      PyObject* answer = PyObject_CallMethodNoArgs(buffer.ptr(), name);
      if (answer == nullptr) {  // not a live jax.Array: nothing to wait for
        PyErr_Clear();
        return true;
      }
      bool yes = answer == Py_True;
      Py_DECREF(answer);
      if (yes) return true;
    }
    return false;
  }

  bool async_dispatch_;  // else an executable's results are computed when its call returns
  std::vector<std::pair<py::object, int64_t>> retired_;
  int64_t retired_bytes_ = 0;
  size_t prune_count_ = kPruneCount;
  int64_t prune_bytes_ = kPruneBytes;
  std::mutex dead_mutex_;
  std::vector<uint64_t> dead_;
  std::atomic<bool> has_dead_{false};
};

// Never destroyed: storages may die after the interpreter has gone.
Memory* memory_ = nullptr;

Memory& memory() {
  TORCH_CHECK(memory_ != nullptr, "neuron: the native device memory is not initialised");
  return *memory_;
}

void release_storage(void* ctx) { memory_->release(reinterpret_cast<uint64_t>(ctx)); }

at::Tensor tensor_on_new_storage(c10::IntArrayRef shape, c10::ScalarType dtype, c10::IntArrayRef strides,
                                 int64_t nbytes, py::object buffer) {
  auto [addr, alloc] = memory().allocate(nbytes, std::move(buffer), dtype);
  void* ptr = reinterpret_cast<void*>(addr);
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                             c10::DataPtr(ptr, ptr, &release_storage, kDevice),
                                                             nullptr, false));
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                    c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(shape, strides);
  return t;
}

// ---- cache keys -----------------------------------------------------------------------------

// Argument kinds, as eager/arguments.py numbers them.
enum Kind : int8_t { TENSOR, OPT_TENSOR, TENSOR_LIST, SCALAR, STATIC, SCALAR_LIST };
// Key tokens: a tag, then the value's words.
// T_DYNAMIC is a real executable input, T_DYNAMIC_COMPLEX a complex one: an executable traced
// for one cannot take the other.
enum Tag : int64_t { T_NONE = 1, T_TENSOR, T_SLOT, T_UNWRITTEN, T_CPU0, T_DYNAMIC, T_DOUBLE, T_INT, T_BOOL,
                     T_STRING, T_DEVICE, T_LIST, T_DYNAMIC_COMPLEX };

struct Key {
  c10::SmallVector<int64_t, 40> words;
  size_t hash = 0;
  void add(int64_t w) {
    words.push_back(w);
    hash ^= static_cast<size_t>(w) + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  }
  bool operator==(const Key& other) const { return hash == other.hash && words == other.words; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash; }
};

// One call's executable inputs, gathered while keying it.
struct Inputs {
  Key key;
  c10::SmallVector<uint64_t, 4> addrs;  // per slot
  c10::SmallVector<Allocation*, 4> allocs;  // per slot; alive while the call's tensors are
  c10::SmallVector<py::object, 4> scalars;
};

struct Config {
  py::object dispatch;  // _register._dispatch(op, *args, **kwargs)
  py::object describe;  // eager.dispatch.describe(op) -> None | "cpu" | argument kinds
  py::object scalar_input;  // eager.storage_io.scalar_input(value, numpy dtype or None)
  py::list pending_checks;
  py::object raise_failed_checks;
  size_t max_pending = 64;
  std::unordered_map<int, py::object> numpy_dtypes;  // ScalarType -> numpy dtype of a CPU scalar
};
Config* config_ = nullptr;

int64_t double_bits(double v) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Device arrays of scalar executable inputs, by (dtype or -1 for a Python number, value bits),
// as eager.storage_io.scalar_input keeps them: moving a host scalar costs more than a small op.
struct ScalarKey {
  int64_t dtype, real, imag;
  bool operator==(const ScalarKey& o) const { return dtype == o.dtype && real == o.real && imag == o.imag; }
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    return std::hash<int64_t>()(k.real) ^ (std::hash<int64_t>()(k.imag) << 1) ^ (std::hash<int64_t>()(k.dtype) << 2);
  }
};
// Process-lifetime tables below are never destroyed: they hold Python objects, and static
// destructors run after the interpreter has gone.
auto& scalar_inputs_ = *new std::unordered_map<ScalarKey, py::object, ScalarKeyHash>();
constexpr size_t kMaxScalarInputs = 4096;

// `number` as an executable input: weakly typed where `dtype` is Undefined, else of that dtype.
py::object scalar_input(const c10::Scalar& number, c10::ScalarType dtype) {
  ScalarKey key{static_cast<int64_t>(dtype), 0, 0};
  py::object value;
  if (number.isComplex()) {
    auto c = number.toComplexDouble();
    key.real = double_bits(c.real());
    key.imag = double_bits(c.imag()) ^ 1;
  } else if (number.isFloatingPoint()) {
    key.real = double_bits(number.toDouble());
    key.imag = 2;
  } else {
    key.real = number.isBoolean() ? number.toBool() : number.toLong();
    key.imag = number.isBoolean() ? 3 : 4;
  }
  auto it = scalar_inputs_.find(key);
  if (it != scalar_inputs_.end()) return it->second;
  if (scalar_inputs_.size() >= kMaxScalarInputs) scalar_inputs_.clear();
  py::object np_dtype = py::none();
  if (dtype != c10::ScalarType::Undefined) np_dtype = config_->numpy_dtypes.at(static_cast<int>(dtype));
  py::object made = config_->scalar_input(torch::jit::toPyObject(c10::IValue(number)), np_dtype);
  scalar_inputs_.emplace(key, made);
  return made;
}

// The value of a CPU scalar tensor, read directly (`item()` would go through the dispatcher).
c10::Scalar cpu_scalar(const at::Tensor& t) {
  const void* data = t.const_data_ptr();
  switch (t.scalar_type()) {
    case c10::ScalarType::Double: return *static_cast<const double*>(data);
    case c10::ScalarType::Long: return *static_cast<const int64_t*>(data);
    case c10::ScalarType::Bool: return *static_cast<const bool*>(data);
    case c10::ScalarType::ComplexDouble: return *static_cast<const c10::complex<double>*>(data);
    default: return t.item();
  }
}

bool key_tensor(const at::Tensor& t, Inputs& in) {
  if (!t.defined()) {
    in.key.add(T_NONE);
    return true;
  }
  if (t.device().type() != c10::DeviceType::PrivateUse1) {
    if (t.device().type() != c10::DeviceType::CPU || t.dim() != 0) return false;
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {  // reaches Python as the number itself
      c10::Scalar number = cpu_scalar(t);
      if (number.isFloatingPoint() || number.isComplex()) {
        in.key.add(number.isComplex() ? T_DYNAMIC_COMPLEX : T_DYNAMIC);
        in.scalars.push_back(scalar_input(number, c10::ScalarType::Undefined));
      } else {
        in.key.add(number.isBoolean() ? T_BOOL : T_INT);
        in.key.add(number.isBoolean() ? number.toBool() : number.toLong());
      }
      return true;
    }
    // A CPU scalar joins as a value (as CUDA allows), of its dtype.
    if (!config_->numpy_dtypes.count(static_cast<int>(t.scalar_type()))) return false;
    in.scalars.push_back(scalar_input(cpu_scalar(t), t.scalar_type()));
    in.key.add(T_CPU0);
    in.key.add(static_cast<int64_t>(t.scalar_type()));
    return true;
  }
  uint64_t addr = reinterpret_cast<uint64_t>(t.storage().unsafeGetStorageImpl()->data_ptr().get());
  size_t slot = 0;
  while (slot < in.addrs.size() && in.addrs[slot] != addr) ++slot;
  if (slot == in.addrs.size()) {
    auto found = memory().table.find(addr);
    if (found == memory().table.end()) return false;
    Allocation* alloc = found->second.get();
    in.addrs.push_back(addr);
    // a storage's size and dtype fix its buffer's shape and dtype, which the executable takes
    in.key.add(alloc->buffer.is_none() ? T_UNWRITTEN : T_SLOT);
    in.key.add(alloc->nbytes);
    in.key.add(static_cast<int64_t>(alloc->dtype));
    in.allocs.push_back(alloc);
  }
  in.key.add(T_TENSOR);
  in.key.add(static_cast<int64_t>(slot));
  in.key.add(static_cast<int64_t>(t.scalar_type()));
  in.key.add(t.dim());
  for (int64_t s : t.sizes()) in.key.add(s);
  for (int64_t s : t.strides()) in.key.add(s);
  in.key.add(t.storage_offset());
  in.key.add(static_cast<int64_t>(t.is_conj()) | static_cast<int64_t>(t.is_neg()) << 1);
  return true;
}

bool key_value(const c10::IValue& v, Kind kind, Inputs& in) {
  if (v.isTensor()) return key_tensor(v.toTensor(), in);
  if (v.isNone()) {
    in.key.add(T_NONE);
    return true;
  }
  bool dynamic = kind != STATIC;  // a float Scalar/float argument is an executable input
  if (v.isDouble()) {
    if (dynamic) {
      in.key.add(T_DYNAMIC);
      in.scalars.push_back(scalar_input(v.toDouble(), c10::ScalarType::Undefined));
    } else {
      in.key.add(T_DOUBLE);
      in.key.add(double_bits(v.toDouble()));
    }
    return true;
  }
  if (v.isComplexDouble()) {
    if (!dynamic) return false;
    in.key.add(T_DYNAMIC_COMPLEX);
    in.scalars.push_back(scalar_input(v.toComplexDouble(), c10::ScalarType::Undefined));
    return true;
  }
  if (v.isInt()) {
    in.key.add(T_INT);
    in.key.add(v.toInt());
    return true;
  }
  if (v.isBool()) {
    in.key.add(T_BOOL);
    in.key.add(v.toBool());
    return true;
  }
  if (v.isString()) {
    const std::string& s = v.toStringRef();
    in.key.add(T_STRING);
    in.key.add(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += 8) {
      int64_t word = 0;
      std::memcpy(&word, s.data() + i, std::min<size_t>(8, s.size() - i));
      in.key.add(word);
    }
    return true;
  }
  if (v.isDevice()) {
    in.key.add(T_DEVICE);
    in.key.add(static_cast<int64_t>(v.toDevice().type()));
    in.key.add(v.toDevice().index());
    return true;
  }
  if (v.isList()) {
    auto list = v.toListRef();
    in.key.add(T_LIST);
    in.key.add(static_cast<int64_t>(list.size()));
    Kind element = kind == TENSOR_LIST ? OPT_TENSOR : kind == SCALAR_LIST ? SCALAR : STATIC;
    for (const auto& x : list)
      if (!key_value(x, element, in)) return false;
    return true;
  }
  return false;  // generators, storages, symbolic sizes...: Python's path
}

// A compiled graph's inputs (compile/executable.py), keyed as a keyed call's arguments are: the
// key's words as bytes, the executable's arguments (the buffers of written storages in slot
// order, then scalar inputs) and each slot's allocation. None where a value is not one this keys
// (a CPU tensor, a symbolic or other object): Python keys that call.
py::object graph_inputs(const py::list& values) {
  if (!config_ || !memory_) return py::none();  // no device op yet: nothing to key against
  Inputs in;
  for (const auto& v : values) {
    PyObject* o = v.ptr();
    if (THPVariable_Check(o)) {
      const at::Tensor& t = THPVariable_Unpack(o);
      // a graph keys a wrapped number as the CPU scalar tensor it is, which Python does
      if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) return py::none();
      if (!key_tensor(t, in)) return py::none();
    } else if (o == Py_None) {
      in.key.add(T_NONE);
    } else if (PyBool_Check(o)) {
      in.key.add(T_BOOL);
      in.key.add(o == Py_True);
    } else if (PyLong_CheckExact(o)) {
      int overflow = 0;
      int64_t value = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow) return py::none();
      in.key.add(T_INT);
      in.key.add(value);
    } else if (PyFloat_Check(o)) {
      in.key.add(T_DYNAMIC);
      in.scalars.push_back(scalar_input(PyFloat_AS_DOUBLE(o), c10::ScalarType::Undefined));
    } else if (PyComplex_Check(o)) {
      in.key.add(T_DYNAMIC_COMPLEX);
      in.scalars.push_back(scalar_input(c10::complex<double>(PyComplex_RealAsDouble(o), PyComplex_ImagAsDouble(o)),
                                        c10::ScalarType::Undefined));
    } else {
      return py::none();
    }
  }
  py::list args, allocs;
  for (size_t slot = 0; slot < in.allocs.size(); ++slot) {
    if (!in.allocs[slot]->buffer.is_none()) args.append(in.allocs[slot]->buffer);
    allocs.append(memory().find(in.addrs[slot]));
  }
  for (auto& scalar : in.scalars) args.append(scalar);
  py::bytes key(reinterpret_cast<const char*>(in.key.words.data()), in.key.words.size() * sizeof(int64_t));
  return py::make_tuple(std::move(key), std::move(args), std::move(allocs));
}

// ---- cached executables -----------------------------------------------------------------

enum ReturnKind : int8_t { R_ARGUMENT, R_OUTPUT, R_OUTPUTS };
struct ReturnSpec {
  ReturnKind kind;
  int64_t index;  // argument index, or first output
  int64_t count;  // R_OUTPUTS: how many outputs make the list
};

struct OutputSpec {
  std::vector<int64_t> shape, strides;
  c10::ScalarType dtype;
  int64_t nbytes;
};

struct Entry {
  py::object owner;  // eager.kernel.CachedExecutable this entry serves
  py::object fn;     // fn(*held buffers, *scalars) -> (*outputs, *written buffers[, check flags])
  std::vector<OutputSpec> outputs;
  std::vector<int64_t> mutated_slots;
  py::object checks;  // None, or [(error, message)] of its device-side checks
  std::vector<ReturnSpec> returns;
};

enum Mode : int8_t { UNKNOWN, PYTHON, CPU_METADATA, KEYED, EMPTY, EMPTY_STRIDED };

struct OpRecord {
  Mode mode = UNKNOWN;
  py::object overload;
  std::string name;
  std::vector<Kind> kinds;
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> entries;
  int64_t hits = 0;
};

auto& records_ = *new std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpRecord>>();
struct Pending {
  OpRecord* record;
  Key key;
};
thread_local std::vector<Pending> pending_;
auto& owners_ = *new std::unordered_map<PyObject*, std::vector<std::pair<OpRecord*, Key>>>();  // CachedExecutable -> keys

py::object resolve_overload(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  auto sep = name.name.find("::");
  py::object packet = py::module_::import("torch").attr("ops").attr(name.name.substr(0, sep).c_str())
                          .attr(name.name.substr(sep + 2).c_str());
  return packet.attr(name.overload_name.empty() ? "default" : name.overload_name.c_str());
}

OpRecord& record_for(const c10::OperatorHandle& op) {
  auto& slot = records_[&op.schema()];
  if (!slot) {
    slot = std::make_unique<OpRecord>();
    slot->overload = resolve_overload(op);
    slot->name = py::str(slot->overload);
  }
  if (slot->mode == UNKNOWN) {
    py::object described = config_->describe(slot->overload);
    if (described.is_none()) {
      slot->mode = PYTHON;
    } else if (py::isinstance<py::str>(described)) {
      std::string mode = described.cast<std::string>();
      slot->mode = mode == "empty" ? EMPTY : mode == "empty_strided" ? EMPTY_STRIDED : CPU_METADATA;
    } else {
      slot->mode = KEYED;
      for (auto k : described) slot->kinds.push_back(static_cast<Kind>(k.cast<int>()));
    }
  }
  return *slot;
}

// An argument as the Python fallback passes it: ScalarType, Layout and MemoryFormat travel as
// ints in an IValue but as torch.dtype, torch.layout and torch.memory_format in Python.
py::object argument_to_python(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isNone()) return py::none();
  auto is = [&](c10::TypeKind kind) {
    const auto& t = arg.real_type();
    if (t->kind() == kind) return true;
    auto optional = t->cast<c10::OptionalType>();
    return optional && optional->getElementType()->kind() == kind;
  };
  if (is(c10::ScalarTypeType::Kind)) return dtype_object(static_cast<c10::ScalarType>(value.toInt()));
  if (is(c10::LayoutType::Kind))
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(value.toInt()))));
  if (is(c10::MemoryFormatType::Kind)) return py::cast(static_cast<c10::MemoryFormat>(value.toInt()));
  return torch::jit::toPyObject(value);
}

// The call's arguments as the Python fallback passes them: arguments left at their defaults are
// left out (trailing positional ones, and keyword-only ones). Pops them off the stack.
std::pair<py::list, py::dict> python_arguments(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const auto& arguments = schema.arguments();
  size_t n = arguments.size();
  auto values = torch::jit::last(*stack, n);
  auto is_default = [&](size_t i) {
    const auto& d = arguments[i].default_value();
    return d.has_value() && *d == values[i];
  };
  size_t keyword_start = n;
  while (keyword_start > 0 && arguments[keyword_start - 1].kwarg_only()) --keyword_start;
  size_t positional_end = keyword_start;
  while (positional_end > 0 && is_default(positional_end - 1)) --positional_end;
  py::list args;
  py::dict kwargs;
  for (size_t i = 0; i < positional_end; ++i) args.append(argument_to_python(arguments[i], values[i]));
  for (size_t i = keyword_start; i < n; ++i)
    if (!is_default(i)) kwargs[arguments[i].name().c_str()] = argument_to_python(arguments[i], values[i]);
  torch::jit::drop(*stack, n);
  return {std::move(args), std::move(kwargs)};
}

void push_results(const c10::FunctionSchema& schema, const py::object& result, torch::jit::Stack* stack) {
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].real_type()));
  } else if (returns.size() > 1) {
    auto items = result.cast<py::tuple>();
    for (size_t i = 0; i < returns.size(); ++i)
      stack->push_back(torch::jit::toIValue(items[i], returns[i].real_type()));
  }
}

// Run the call in Python, through the dispatch function `configure` gave.
void run_python(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack) {
  auto [args, kwargs] = python_arguments(op.schema(), stack);
  args.insert(0, rec.overload);
  push_results(op.schema(), config_->dispatch(*py::tuple(args), **kwargs), stack);
}

// Custom ops' autograd (`torch_neuronx.custom_op`): their autograd kernel is Python. On neuron a
// call that records no gradient goes below autograd here, as a built-in op's does; one that
// records runs that Python kernel, `autograd_impl(keyset, *args, **keyword_only_args)`.
auto& autograd_kernels_ = *new std::unordered_map<const c10::FunctionSchema*, py::object>();

bool records_gradient(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const auto& v : torch::jit::last(*stack, op.schema().arguments().size())) {
    if (v.isTensor() && v.toTensor().requires_grad()) return true;
    if (v.isTensorList())
      for (const auto& t : v.toTensorList())
        if (static_cast<at::Tensor>(t).requires_grad()) return true;
    if (v.isList())
      for (const auto& item : v.toListRef())
        if (item.isTensor() && item.toTensor().requires_grad()) return true;
  }
  return false;
}

void autograd_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  if (!records_gradient(op, stack)) {
    at::AutoDispatchBelowAutograd below;
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
    return;
  }
  py::gil_scoped_acquire gil;
  auto [args, kwargs] = python_arguments(op.schema(), stack);
  args.insert(0, py::cast(keys));
  push_results(op.schema(), autograd_kernels_.at(&op.schema())(*py::tuple(args), **kwargs), stack);
}

auto& libraries_ = *new std::vector<std::unique_ptr<torch::Library>>();

void register_autograd(const std::string& ns, const std::string& name, py::object kernel) {
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::AutogradPrivateUse1,
                                              __FILE__, __LINE__);
  lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&autograd_kernel>());
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow((ns + "::" + name).c_str(), "");
  autograd_kernels_[&handle.schema()] = std::move(kernel);
  libraries_.push_back(std::move(lib));
}

// ---- torch.profiler: device activity (ProfilerActivity.PrivateUse1) -------------------------
//
// A Kineto plugin. While a session records, every executable launched is waited for, so the
// device runs one at a time, and becomes one device activity: its name, launch to results ready
// on the device's one queue, and the correlation id of the op that launched it (Kineto pushes
// one per recorded op), which links it to that op so PyTorch adds its time to the op's device
// time. Activities outlive their session: PyTorch's trace keeps pointers to them until it is
// saved, so the last sessions' activities are kept.

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct DeviceActivity final : libkineto::ITraceActivity {
  std::string label;
  int64_t start = 0, end = 0;
  int32_t correlation = 0;
  const libkineto::ITraceActivity* linked = nullptr;
  const libkineto::TraceSpan* span = nullptr;

  int64_t deviceId() const override { return 0; }
  int64_t resourceId() const override { return 0; }
  int32_t getThreadId() const override { return 0; }
  int64_t timestamp() const override { return start; }
  int64_t duration() const override { return end - start; }
  int64_t correlationId() const override { return correlation; }
  int flowType() const override { return libkineto::kLinkAsyncCpuGpu; }
  int64_t flowId() const override { return correlation; }
  bool flowStart() const override { return false; }
  libkineto::ActivityType type() const override { return libkineto::ActivityType::CONCURRENT_KERNEL; }
  const std::string name() const override { return label; }
  const libkineto::ITraceActivity* linkedActivity() const override { return linked; }
  const libkineto::TraceSpan* traceSpan() const override { return span; }
  void log(libkineto::ActivityLogger& logger) const override { logger.handleActivity(*this); }
  const std::string metadataJson() const override { return "\"device\": 0, \"stream\": 0"; }
};

using Activities = std::deque<DeviceActivity>;
std::atomic<bool> profiling_{false};
std::mutex activities_mutex_;
std::shared_ptr<Activities> recording_;                      // the recording session's, under the mutex
auto& kept_ = *new std::deque<std::shared_ptr<Activities>>();  // the last sessions', for their traces
thread_local std::vector<int32_t> correlation_;

void record_activity(std::string label, int64_t start, int64_t end) {
  std::lock_guard<std::mutex> lock(activities_mutex_);
  if (!recording_) return;
  auto& a = recording_->emplace_back();
  a.label = std::move(label);
  a.start = start;
  a.end = end;
  a.correlation = correlation_.empty() ? 0 : correlation_.back();
}

class ProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  ProfilerSession() : activities_(std::make_shared<Activities>()) {}
  void start() override {
    std::lock_guard<std::mutex> lock(activities_mutex_);
    recording_ = activities_;
    profiling_ = true;
  }
  void stop() override {
    std::lock_guard<std::mutex> lock(activities_mutex_);
    profiling_ = false;
    if (recording_ == activities_) recording_.reset();
  }
  std::vector<std::string> errors() override { return {}; }
  void processTrace(libkineto::ActivityLogger& logger) override {
    for (auto& a : *activities_) logger.handleActivity(a);
  }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    {
      std::lock_guard<std::mutex> lock(activities_mutex_);
      kept_.push_back(activities_);
      while (kept_.size() > 8) kept_.pop_front();
    }
    for (auto& a : *activities_) {
      if (a.correlation) a.linked = linked(a.correlation);
      a.span = a.linked ? a.linked->traceSpan() : nullptr;
      logger.handleActivity(a);
    }
  }
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "neuron", "neuron:0"});
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {{0, 0, 0, "executables"}}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }
  void pushCorrelationId(uint64_t id) override { correlation_.push_back(static_cast<int32_t>(id)); }
  void popCorrelationId() override {
    if (!correlation_.empty()) correlation_.pop_back();
  }

 private:
  std::shared_ptr<Activities> activities_;
};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return types_; }
  // A session only where the profile asks for device activity (ProfilerActivity.PrivateUse1).
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config&) override {
    if (!types.count(libkineto::ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<ProfilerSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "neuron";
  std::set<libkineto::ActivityType> types_{libkineto::ActivityType::CONCURRENT_KERNEL};
};

// Wait for an executable's results while a session records, and record it.
void record_launch(const std::string& label, int64_t start, PyObject* results) {
  if (PyTuple_GET_SIZE(results) > 0)
    py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(results, 0)).attr("block_until_ready")();
  record_activity(label, start, now_ns());
}

void launch(OpRecord& rec, Entry& entry, Inputs& in, torch::jit::Stack* stack, size_t n) {
  c10::SmallVector<PyObject*, 8> args;
  for (auto& alloc : in.allocs)
    if (!alloc->buffer.is_none()) args.push_back(alloc->buffer.ptr());
  for (auto& scalar : in.scalars) args.push_back(scalar.ptr());
  int64_t start = profiling_ ? now_ns() : 0;
  auto result = py::reinterpret_steal<py::object>(PyObject_Vectorcall(entry.fn.ptr(), args.data(), args.size(), nullptr));
  if (!result) throw py::error_already_set();
  PyObject* results = result.ptr();
  if (start) record_launch(rec.name, start, results);
  size_t count = entry.outputs.size();
  for (size_t i = 0; i < entry.mutated_slots.size(); ++i)
    in.allocs[entry.mutated_slots[i]]->buffer = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(results, count + i));
  if (!entry.checks.is_none()) {
    auto flags = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(results, count + entry.mutated_slots.size()));
    config_->pending_checks.append(py::make_tuple(flags, entry.checks, rec.name));
    if (config_->pending_checks.size() > config_->max_pending) config_->raise_failed_checks();
  }
  std::vector<at::Tensor> made;
  made.reserve(count);
  for (size_t i = 0; i < entry.outputs.size(); ++i) {
    const auto& spec = entry.outputs[i];
    made.push_back(tensor_on_new_storage(spec.shape, spec.dtype, spec.strides, spec.nbytes,
                                          py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(results, i))));
  }
  std::vector<c10::IValue> arguments(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);
  for (const auto& r : entry.returns) {
    if (r.kind == R_ARGUMENT) {
      stack->push_back(arguments[r.index]);
    } else if (r.kind == R_OUTPUT) {
      stack->push_back(made[r.index]);
    } else {
      std::vector<at::Tensor> list(made.begin() + r.index, made.begin() + r.index + r.count);
      stack->push_back(c10::IValue(c10::List<at::Tensor>(list)));
    }
  }
}

// `empty.memory_format(size, dtype, layout, device, pin_memory, memory_format)` and
// `empty_strided(size, stride, dtype, layout, device, pin_memory)`: a tensor on a new storage
// never written. False (nothing done) where Python must answer: an unsupported dtype, layout
// or memory format, or pinned memory.
bool make_empty(bool strided, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 6);
  const auto& dtype_arg = args[strided ? 2 : 1];
  const auto& layout = args[strided ? 3 : 2];
  const auto& pinned = args[strided ? 5 : 4];
  auto dtype = dtype_arg.isNone() ? c10::typeMetaToScalarType(c10::get_default_dtype())
                                  : static_cast<c10::ScalarType>(dtype_arg.toInt());
  if (!config_->numpy_dtypes.count(static_cast<int>(dtype))) return false;
  if (!layout.isNone() && static_cast<c10::Layout>(layout.toInt()) != c10::Layout::Strided) return false;
  if (!pinned.isNone() && pinned.toBool()) return false;
  std::vector<int64_t> sizes = args[0].toIntVector();
  std::vector<int64_t> strides;
  int64_t itemsize = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t nbytes;
  if (strided) {
    strides = args[1].toIntVector();
    int64_t span = 1;
    for (size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
    nbytes = std::find(sizes.begin(), sizes.end(), 0) != sizes.end() ? 0 : span * itemsize;
  } else {
    auto format = args[5].isNone() ? c10::MemoryFormat::Contiguous : static_cast<c10::MemoryFormat>(args[5].toInt());
    if (format == c10::MemoryFormat::ChannelsLast && sizes.size() == 4) {
      strides = c10::get_channels_last_strides_2d(sizes);
    } else if (format == c10::MemoryFormat::ChannelsLast3d && sizes.size() == 5) {
      strides = c10::get_channels_last_strides_3d(sizes);
    } else if (format == c10::MemoryFormat::Contiguous || format == c10::MemoryFormat::Preserve) {
      strides.assign(sizes.size(), 1);
      for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d)
        strides[d] = strides[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
    } else {
      return false;
    }
    nbytes = c10::multiply_integers(sizes) * itemsize;
  }
  auto t = tensor_on_new_storage(sizes, dtype, strides, nbytes, py::none());
  torch::jit::drop(*stack, 6);
  stack->push_back(std::move(t));
  return true;
}

// Set while a storage waits for a collective (runtime/deferred.py): Python checks each call's inputs.
bool route_to_python_ = false;

void neuron_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  memory().reap();
  OpRecord& rec = record_for(op);
  if (rec.mode == CPU_METADATA) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  if ((rec.mode == EMPTY || rec.mode == EMPTY_STRIDED) && make_empty(rec.mode == EMPTY_STRIDED, stack)) return;
  if (rec.mode == KEYED && !route_to_python_) {
    size_t n = op.schema().arguments().size();
    Inputs in;
    bool keyed = true;
    auto values = torch::jit::last(*stack, n);
    for (size_t i = 0; i < n && keyed; ++i) keyed = key_value(values[i], rec.kinds[i], in);
    if (keyed) {
      auto it = rec.entries.find(in.key);
      if (it != rec.entries.end()) {
        auto entry = it->second;  // held: the launch may run Python that forgets it
        rec.hits += 1;
        launch(rec, *entry, in, stack, n);
        return;
      }
      pending_.push_back({&rec, std::move(in.key)});
      struct Pop {
        ~Pop() { pending_.pop_back(); }
      } pop;
      run_python(op, rec, stack);
      return;
    }
  }
  run_python(op, rec, stack);
}

void register_kernels(const std::vector<std::string>& names, bool fallback) {
  if (fallback) {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__,
                                                __LINE__);
    lib->fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
    libraries_.push_back(std::move(lib));
  }
  if (names.empty()) return;
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                              __LINE__);
  for (const auto& name : names) lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
  libraries_.push_back(std::move(lib));
}

// Called by a lowering kernel that ran for the innermost pending keyed call of `op`.
bool remember(const py::object& op, const py::object& owner, const py::object& fn, const py::list& outputs,
              std::vector<int64_t> mutated_slots, const py::object& checks, const py::list& returns) {
  if (pending_.empty() || !pending_.back().record->overload.is(op)) return false;
  auto entry = std::make_shared<Entry>();
  entry->owner = owner;
  entry->fn = fn;
  for (auto spec : outputs) {
    auto t = spec.cast<py::tuple>();
    entry->outputs.push_back({t[0].cast<std::vector<int64_t>>(), t[2].cast<std::vector<int64_t>>(),
                              scalar_type_of(t[1]), t[3].cast<int64_t>()});
  }
  entry->mutated_slots = std::move(mutated_slots);
  entry->checks = checks;
  for (auto r : returns) {
    auto t = r.cast<py::tuple>();
    entry->returns.push_back({static_cast<ReturnKind>(t[0].cast<int>()), t[1].cast<int64_t>(), t[2].cast<int64_t>()});
  }
  Pending& p = pending_.back();
  p.record->entries[p.key] = entry;
  owners_[owner.ptr()].emplace_back(p.record, p.key);
  return true;
}

// The Python cache dropped `owner`: drop every entry serving it.
void forget(const py::object& owner) {
  auto it = owners_.find(owner.ptr());
  if (it == owners_.end()) return;
  for (auto& [record, key] : it->second) {
    auto found = record->entries.find(key);
    if (found != record->entries.end() && found->second->owner.is(owner)) record->entries.erase(found);
  }
  owners_.erase(it);
}

py::dict hit_counts() {
  py::dict counts;
  for (auto& [schema, rec] : records_)
    if (rec->hits) counts[py::str(rec->name)] = rec->hits;
  return counts;
}

void reset_hit_counts() {
  for (auto& [schema, rec] : records_) rec->hits = 0;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The native eager hot path of the neuron device (torch_neuronx/csrc/native.cpp).";

  py::class_<Allocation, std::shared_ptr<Allocation>>(m, "Allocation")
      .def_property(
          "buffer", [](const Allocation& a) { return a.buffer; },
          [](Allocation& a, py::object b) { a.buffer = std::move(b); })
      .def_readonly("nbytes", &Allocation::nbytes)
      .def_property_readonly("dtype", [](const Allocation& a) {
        return a.dtype == c10::ScalarType::Undefined ? py::object(py::none()) : dtype_object(a.dtype);
      });

  py::class_<Stats>(m, "Stats")
      .def_readonly("allocated", &Stats::allocated)
      .def_readonly("peak", &Stats::peak)
      .def_readonly("num_alloc", &Stats::num_alloc)
      .def_readonly("num_free", &Stats::num_free)
      .def_readonly("num_ooms", &Stats::num_ooms);

  // The device memory: one per process, made by `init`.
  py::class_<Memory, std::unique_ptr<Memory, py::nodelete>>(m, "Memory")
      .def_property_readonly("capacity", [](const Memory& mem) { return mem.capacity; })
      .def_property_readonly("stats", [](Memory& mem) {
        mem.reap();
        return mem.stats;
      })
      .def("get", [](Memory& mem, uint64_t addr) {
        mem.reap();
        return mem.find(addr);
      })
      .def("__getitem__", [](Memory& mem, uint64_t addr) {
        auto alloc = mem.find(addr);
        if (!alloc) throw py::key_error(std::to_string(addr));
        return alloc;
      })
      .def("__len__", [](Memory& mem) {
        mem.reap();
        return mem.table.size();
      })
      .def("reset_peak", [](Memory& mem) {
        mem.reap();
        mem.stats.peak = mem.stats.allocated;
      })
      .def("in_flight", &Memory::in_flight)
      // Two storages traded their data pointers; each deleter went with its address.
      .def("swapped", [](Memory&, uint64_t, uint64_t) {})
      .def_property_readonly("retired", [](Memory& mem) {
        mem.reap();
        return mem.retired();
      })
      .def("reap", &Memory::reap);

  m.def("init", [](int64_t capacity, bool async_dispatch) {
    if (!memory_) memory_ = new Memory(capacity, async_dispatch);
    return memory_;
  }, py::return_value_policy::reference);
  m.def("configure", [](py::object dispatch, py::object describe, py::object scalar_input, py::list pending_checks,
                        py::object raise_failed, size_t max_pending, py::dict numpy_dtypes) {
    if (!config_) config_ = new Config();
    config_->dispatch = std::move(dispatch);
    config_->describe = std::move(describe);
    config_->scalar_input = std::move(scalar_input);
    config_->pending_checks = std::move(pending_checks);
    config_->raise_failed_checks = std::move(raise_failed);
    config_->max_pending = max_pending;
    for (auto [dtype, np_dtype] : numpy_dtypes)
      config_->numpy_dtypes[static_cast<int>(scalar_type_of(dtype))] = py::reinterpret_borrow<py::object>(np_dtype);
  });
  m.def("tensor_on_new_storage", [](std::vector<int64_t> shape, py::object dtype, std::vector<int64_t> strides,
                                    int64_t nbytes, py::object buffer) {
    return tensor_on_new_storage(shape, scalar_type_of(dtype), strides, nbytes, std::move(buffer));
  });
  m.def("register_kernels", &register_kernels, py::arg("names"), py::arg("fallback"));
  m.def("profiling", []() { return profiling_.load(); });
  m.def("route_to_python", [](bool on) { route_to_python_ = on; });
  m.def("record_activity", &record_activity, py::arg("name"), py::arg("start_ns"), py::arg("end_ns"));
  m.def("register_profiler", []() {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        []() -> std::unique_ptr<libkineto::IActivityProfiler> { return std::make_unique<ActivityProfiler>(); });
  });
  m.def("register_autograd", &register_autograd, py::arg("namespace"), py::arg("name"), py::arg("kernel"));
  m.def("graph_inputs", &graph_inputs, py::arg("values"));
  m.def("remember", &remember);
  m.def("forget", &forget);
  m.def("hit_counts", &hit_counts);
  m.def("reset_hit_counts", &reset_hit_counts);
}
