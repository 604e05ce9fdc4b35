#!/usr/bin/env bash
# Builds berth's container image with no registry and no container engine: an OCI image
# layout (https://github.com/opencontainers/image-spec) assembled with tar, gzip and
# sha256sum from
#   - the release binary (`cargo build --release -p berth`, built here when missing or stale),
#   - the shared libraries it links and the dynamic loader, copied from this Debian system
#     (package libc6 and whatever else `ldd` names), with their packages' copyright files,
#   - the CA certificates of Debian's ca-certificates,
#   - a non-root user `nonroot`, uid/gid 65532 (distroless's convention), which the image
#     runs as, a world-writable /tmp and nothing else (no shell).
# One layer, reproducible: files sorted, owned by root (but /home/nonroot), times set to the
# commit's time.
#
#   tools/image.sh                    build target/image/berth-<version>.oci.tar
#   tools/image.sh --no-build         use target/release/berth as it is
#   tools/image.sh --rootfs DIR       only assemble the root file system into DIR (the
#                                     Containerfile's last stage copies it into `scratch`)
#
# The archive loads with `skopeo copy oci-archive:target/image/berth-0.1.0.oci.tar
# docker://REGISTRY/berth:0.1.0` or `podman load -i ...`; the unpacked layout is beside it
# (target/image/oci/). The Containerfile at the repository's root builds the same layout for
# users with a registry. crates/berth/tests/image.rs unpacks the archive and runs berth in it.
#
# Environment: BERTH_IMAGE_DIR overrides the output directory (default target/image);
# BERTH_IMAGE_BINARY packs another binary instead (no build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${BERTH_IMAGE_DIR:-$root/target/image}"
build=1
rootfs_only=""
while (( $# )); do
  case "$1" in
    --no-build) build=0 ;;
    --rootfs) rootfs_only="${2:?--rootfs needs a directory}"; shift ;;
    *) echo "tools/image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

version=$(awk -F'"' '/^version = / { print $2; exit }' "$root/Cargo.toml")
# BERTH_IMAGE_BINARY: another binary (checking the script with a debug build); no build then.
binary="${BERTH_IMAGE_BINARY:-$root/target/release/berth}"
[[ -n "${BERTH_IMAGE_BINARY:-}" ]] && build=0
if (( build )); then
  echo "tools/image.sh: cargo build --release -p berth" >&2
  start=$(date +%s)
  (cd "$root" && cargo build --release --locked -p berth)
  echo "tools/image.sh: release build took $(( $(date +%s) - start ))s" >&2
fi
[[ -x "$binary" ]] || { echo "tools/image.sh: $binary is missing (run without --no-build)" >&2; exit 1; }

# Reproducible times: the commit's, else the epoch.
epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="${rootfs_only:-$work/rootfs}"
mkdir -p "$rootfs"/{usr/local/bin,etc/ssl/certs,tmp,home/nonroot,usr/share/doc/berth-image}

install -m 0755 "$binary" "$rootfs/usr/local/bin/berth"

# What the binary links, and the loader, at the paths the binary asks for; with the Debian
# packages they come from.
packages=()
while read -r lib; do
  [[ -n "$lib" && -e "$lib" ]] || continue
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
  pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1) || true
  [[ -z "$pkg" ]] && pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1) || true
  [[ -n "$pkg" ]] && packages+=("$pkg")
done < <(ldd "$binary" | awk '/=> \// { print $3 } /^[ \t]*\/[^ ]+ \(/ { print $1 }')
# usrmerge: /lib64 and /lib are links into /usr on Debian 12; keep the paths the loader and
# the binary name as plain directories inside the image.

cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
packages+=(ca-certificates)

printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"

# Licences of what the image carries from Debian, and which versions.
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Package} ${Version}\n' "$pkg" >>"$rootfs/usr/share/doc/berth-image/packages.txt"
  if [[ -f "/usr/share/doc/$pkg/copyright" ]]; then
    mkdir -p "$rootfs/usr/share/doc/$pkg"
    cp "/usr/share/doc/$pkg/copyright" "$rootfs/usr/share/doc/$pkg/copyright"
  fi
done
echo "berth $version, $("$binary" --version)" >"$rootfs/usr/share/doc/berth-image/berth.txt"

chmod 1777 "$rootfs/tmp"
chmod 0755 "$rootfs/home/nonroot"
owner_args=(--owner=0 --group=0)
if [[ $(id -u) == 0 ]]; then
  chown -R 0:0 "$rootfs"
  chown 65532:65532 "$rootfs/home/nonroot"
  owner_args=()
fi
if [[ -n "$rootfs_only" ]]; then
  echo "tools/image.sh: root file system in $rootfs_only" >&2
  exit 0
fi

oci="$out/oci"
rm -rf "$oci"
mkdir -p "$oci/blobs/sha256"
layer_tar="$work/layer.tar"
tar --sort=name --mtime="@$epoch" --numeric-owner "${owner_args[@]}" --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$rootfs" -cf "$layer_tar" .
diff_id=$(sha256sum "$layer_tar" | cut -d' ' -f1)
gzip -n -9 <"$layer_tar" >"$work/layer.tar.gz"
layer=$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)
layer_size=$(stat -c %s "$work/layer.tar.gz")
mv "$work/layer.tar.gz" "$oci/blobs/sha256/$layer"

arch=$(dpkg --print-architecture)
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
labels="\"org.opencontainers.image.title\":\"berth\",\"org.opencontainers.image.version\":\"$version\",\"org.opencontainers.image.revision\":\"$commit\",\"org.opencontainers.image.licenses\":\"Apache-2.0\",\"org.opencontainers.image.created\":\"$created\""
config="{\"architecture\":\"$arch\",\"os\":\"linux\",\"created\":\"$created\",\"config\":{\"User\":\"65532:65532\",\"Entrypoint\":[\"/usr/local/bin/berth\"],\"Cmd\":[\"run\"],\"Env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\",\"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\"],\"WorkingDir\":\"/home/nonroot\",\"Labels\":{$labels}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},\"history\":[{\"created\":\"$created\",\"created_by\":\"tools/image.sh\"}]}"
printf '%s' "$config" >"$work/config.json"
config_digest=$(sha256sum "$work/config.json" | cut -d' ' -f1)
config_size=$(stat -c %s "$work/config.json")
mv "$work/config.json" "$oci/blobs/sha256/$config_digest"

manifest="{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_digest\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer\",\"size\":$layer_size}],\"annotations\":{$labels}}"
printf '%s' "$manifest" >"$work/manifest.json"
manifest_digest=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
manifest_size=$(stat -c %s "$work/manifest.json")
mv "$work/manifest.json" "$oci/blobs/sha256/$manifest_digest"

printf '{"imageLayoutVersion":"1.0.0"}' >"$oci/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"localhost/berth:%s"}}]}' \
  "$manifest_digest" "$manifest_size" "$version" "$version" >"$oci/index.json"

archive="$out/berth-$version.oci.tar"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$oci" -cf "$archive" .
echo "tools/image.sh: $archive ($(( $(stat -c %s "$archive") / 1024 / 1024 )) MiB; layer sha256:$layer, $(( layer_size / 1024 / 1024 )) MiB compressed, $(( $(stat -c %s "$layer_tar") / 1024 / 1024 )) MiB unpacked)" >&2
echo "$archive"
