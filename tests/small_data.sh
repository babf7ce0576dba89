# small_data.sh - sourced by the training tests: a small copy of
# Fashion-MNIST, IDX files as the originals, keeps their evaluations short.
#   small_data SRC_DIR DST_DIR N_TRAIN N_TEST
be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
small_idx() {   # small_idx SRC_PREFIX DST_PREFIX N
  { printf "\x00\x00\x08\x03$(be32 $3)$(be32 28)$(be32 28)"; zcat "$1-images-idx3-ubyte.gz" | tail -c +17 | head -c $(($3 * 784)); } > "$2-images-idx3-ubyte"
  { printf "\x00\x00\x08\x01$(be32 $3)"; zcat "$1-labels-idx1-ubyte.gz" | tail -c +9 | head -c $3; } > "$2-labels-idx1-ubyte"
}
small_data() {
  mkdir -p "$2"
  small_idx "$1/train" "$2/train" "$3"
  small_idx "$1/t10k" "$2/t10k" "$4"
}
