#!/usr/bin/env bash
# The per-ISA builds of src/cpu/kernels/ must not define any weak (COMDAT) symbol outside their
# own namespace flashpp::cpu::isa_<level>: the linker keeps one copy of a weak symbol, so an
# inline function compiled with AVX-512 in one build could stand in for the AVX2 build's copy
# and fault on an AVX2 machine. Usage: check_kernel_symbols.sh NM OBJECT...
set -euo pipefail
nm_tool=$1; shift
bad=0
for object in "$@"; do
  leaks=$("$nm_tool" -C "$object" | awk '$1 ~ /^[0-9a-f]+$/ && $2 ~ /^[WVu]$/' |
          grep -v -e 'flashpp::cpu::isa_' -e 'DW\.ref\.' || true)
  if [ -n "$leaks" ]; then
    echo "$object defines shared weak symbols:"
    echo "$leaks"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "ok: $# kernel objects, no weak symbol outside flashpp::cpu::isa_*"
exit $bad
