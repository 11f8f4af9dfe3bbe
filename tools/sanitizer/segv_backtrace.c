// LD_PRELOAD library: on SIGSEGV / SIGBUS / SIGABRT, print the native backtrace (glibc backtrace_symbols_fd) to
// stderr and exit 128 + signal. For a crash inside an extension where gdb is absent (e.g. the iostream crash that
// device/csrc/common/refusal.h describes):
//
//   gcc -shared -fPIC -O1 -o /tmp/segv_backtrace.so tools/sanitizer/segv_backtrace.c
//   LD_PRELOAD=/tmp/segv_backtrace.so python tools/sanitizer/check_binding_errors.py
//
// Frames print as module(+offset); `addr2line -Cfe module offset` names an unexported one.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t* si, void* uc) {
  char buf[160];
  int n = snprintf(buf, sizeof buf, "\n*** native signal %d at address %p; backtrace:\n", sig, si->si_addr);
  write(2, buf, n);
  void* frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  _exit(128 + sig);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
  sigaction(SIGABRT, &sa, 0);
}
