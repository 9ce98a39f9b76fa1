# Sourced by launch/setup.sh and launch/fuzz.sh: apt_install_missing PACKAGE... installs the
# Debian/Ubuntu packages not yet installed (sudo when not root); SKIP_APT=1 skips it.
apt_install_missing() {
  [ "${SKIP_APT:-0}" = "1" ] && return 0
  local sudo="" p missing=()
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
