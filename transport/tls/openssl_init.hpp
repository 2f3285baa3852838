#pragma once

namespace chorus {

// OpenSSL's state is kept until the process ends. Threads of chorus (the passages' relay, a data
// connection's TLS, the seals of the data plane) may still call OpenSSL while exit() runs, and the
// cleanup OpenSSL registers with atexit() would free its locks under them. The first OpenSSL call
// of a process decides whether that cleanup is registered, so each file of chorus that calls
// OpenSSL calls this from a static initializer, before main. True when OpenSSL initialised.
// Where something else initialised OpenSSL first (Python's ssl module, before `import chorus`), its
// cleanup stays registered; the Python package then stops chorus from Python's own atexit, which
// runs before it.
bool keep_openssl_until_exit();

}  // namespace chorus
