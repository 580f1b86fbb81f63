// TEMPORARY: replaced by the tiled CPU backend (the forward lives in flash_forward.cpp).
#include "cpu_backend.hpp"
namespace flashpp::cpu {
void flash_backward(const detail::BackwardArgs& a) { reference_backward(a); }
std::size_t backward_workspace_size(const detail::Problem&) { return 0; }
}
