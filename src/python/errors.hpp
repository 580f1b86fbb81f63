// flashpp::Error -> Python exceptions, with the C++ message unchanged:
//   invalid_argument               -> ValueError
//   unsupported, about a dtype     -> TypeError
//   unsupported, anything else     -> NotImplementedError (a RuntimeError)
//   backend_failure, internal      -> RuntimeError
#pragma once

namespace flashpp::python {

void register_error_translation();

}  // namespace flashpp::python
