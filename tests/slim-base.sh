#!/usr/bin/env bash
# Make a debootstrapped Debian root file system what Debian's official `-slim` images are, as
# debuerreotype (the tool that builds them) makes them: its minimizing config (apt cleans up
# after every install, keeps no package caches or translations; debuerreotype-minimizing-config)
# and its slimify step (documentation, man pages and translations removed, and kept out of
# later installs by a dpkg config; debuerreotype-slimify, .slimify-excludes and
# .slimify-includes; github.com/debuerreotype/debuerreotype, read 2026-11-30). Without it the
# stand-in base here is 199 MB where the real debian:bookworm-slim is about 75 MB.
#     tests/slim-base.sh ROOTFS
set -euo pipefail
root=$1

# Minimizing config: no services started at install, apt cleans after itself.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
echo 'force-unsafe-io' > "$root/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
cat > "$root/etc/apt/apt.conf.d/docker-clean" <<CONF
DPkg::Post-Invoke { $clean };
APT::Update::Post-Invoke { $clean };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
echo 'Acquire::GzipIndexes "true";' > "$root/etc/apt/apt.conf.d/docker-gzip-indexes"
echo 'Acquire::Languages "none";' > "$root/etc/apt/apt.conf.d/docker-no-languages"
echo 'Apt::AutoRemove::SuggestsImportant "false";' \
  > "$root/etc/apt/apt.conf.d/docker-autoremove-suggests"

# Slimify: these paths go, and stay out of every later install.
excludes=(/usr/share/doc/\* /usr/share/groff/\* /usr/share/info/\* /usr/share/linda/\*
          /usr/share/lintian/overrides/\* /usr/share/locale/\* /usr/share/man/\*)
includes=(/usr/share/doc/\*/copyright /usr/share/locale/locale.alias)
{
  for path in "${excludes[@]}"; do echo "path-exclude $path"; done
  for path in "${includes[@]}"; do echo "path-include $path"; done
} > "$root/etc/dpkg/dpkg.cfg.d/docker"
for dir in doc groff info linda lintian/overrides locale man; do
  [ -d "$root/usr/share/$dir" ] || continue
  find "$root/usr/share/$dir" -depth -mindepth 1 -not -type d -not -name copyright \
    -not -name locale.alias -delete
  find "$root/usr/share/$dir" -depth -mindepth 1 -type d -empty -delete
done

# What the official image ships without: apt's lists and caches, and debootstrap's leftovers.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
  "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log "$root"/var/log/apt/*
