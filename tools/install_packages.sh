# Sourced by tools/setup.sh and tools/fuzz.sh: installs the Debian packages given that are
# not installed yet ('apt-get update' runs only then), as root or through sudo.
#
#   install_missing_packages LABEL PACKAGE...
install_missing_packages() {
  local label="$1"
  shift
  local missing=() p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$label: installing Debian packages: ${missing[*]}"
  local sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
