// How both extensions (nvfp4_quantize: quantize/bindings.cpp, nvfp4_gemm: gemm/bindings.cpp) report a refused call:
// the binding returns "" when it launched, else a message that the Python layer raises as RuntimeError
// (device/_ops.py _raise_refusal, device/gemm.py). No C++ exception leaves a module, and no message is formatted
// with iostreams:
//
//   The H100 machine's compiler (/opt/gcc) links libstdc++ statically into an extension. Inside such a module an
//   ostream's numeric output (operator<<(long), which c10::str and TORCH_CHECK's message use) looks its num_put
//   facet up by an id that this private copy of libstdc++ never initialised, calls an unrelated facet and crashes
//   (SIGSEGV in codecvt<char16_t>::do_unshift, called from ostream::_M_insert<long>;
//   tools/sanitizer/check_binding_errors.py). Messages are therefore built by nvfp4::message from strings and
//   std::to_string, which use no locale.
#pragma once

#include <cuda_runtime.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <ATen/core/Tensor.h>

namespace nvfp4 {

namespace message_detail {
inline void append(std::string& s, const char* p) { s += p; }
inline void append(std::string& s, const std::string& p) { s += p; }
inline void append(std::string& s, const c10::Device& d) { s += d.str(); }  // formatted inside libc10
inline void append(std::string& s, c10::ScalarType t) { s += c10::toString(t); }
template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, char>, int> = 0>
void append(std::string& s, T v) {
  s += std::to_string(v);
}
}  // namespace message_detail

// The pieces (strings, integers, devices, dtypes) concatenated, without iostreams.
template <typename... Pieces>
std::string message(const Pieces&... pieces) {
  std::string s;
  (message_detail::append(s, pieces), ...);
  return s;
}

// The last CUDA error (cudaGetLastError, which also clears it) as a message; "" when there was none.
inline std::string launch_status(const char* who) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : message(who, ": kernel launch failed: ", cudaGetErrorString(e));
}

// A binding `std::string f(Args...)` as Python sees it: its message, or the message of anything a torch call inside
// it threw (an allocation that failed, C10_CUDA_CHECK), caught here as a last resort.
template <typename... Args>
auto returning_errors(std::string (*f)(Args...)) {
  return [f](Args... args) -> std::string {
    try {
      return f(std::forward<Args>(args)...);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "nvfp4: unknown C++ error";
    }
  };
}

}  // namespace nvfp4

// In a function returning std::string: return the message built from the pieces unless `cond` holds.
#define NVFP4_REFUSE_UNLESS(cond, ...)                      \
  do {                                                      \
    if (!(cond)) return ::nvfp4::message(__VA_ARGS__);      \
  } while (0)

// In a function returning std::string: return the message of `expr` (a std::string) unless it is empty.
#define NVFP4_RETURN_IF_ERROR(expr)                         \
  do {                                                      \
    std::string nvfp4_err_ = (expr);                        \
    if (!nvfp4_err_.empty()) return nvfp4_err_;             \
  } while (0)

namespace nvfp4 {

// A buffer a kernel reads or writes: a defined CUDA tensor, contiguous, and (in the second form) of dtype `dt`;
// "" when it is, else the refusal "<who>: <what> must be ...".
inline std::string check_cuda_tensor(const char* who, const at::Tensor& t, const char* what) {
  NVFP4_REFUSE_UNLESS(t.defined() && t.is_cuda(), who, ": ", what, " must be a CUDA tensor");
  NVFP4_REFUSE_UNLESS(t.is_contiguous(), who, ": ", what, " must be contiguous");
  return {};
}

inline std::string check_cuda_tensor(const char* who, const at::Tensor& t, const char* what, c10::ScalarType dt) {
  NVFP4_RETURN_IF_ERROR(check_cuda_tensor(who, t, what));
  NVFP4_REFUSE_UNLESS(t.scalar_type() == dt, who, ": ", what, " has dtype ", t.scalar_type(), ", expected ", dt);
  return {};
}

}  // namespace nvfp4
