# Sourced by the scripts that build Maven projects: installs Maven from
# Debian's packages when the machine has none.
if ! command -v mvn > /dev/null; then
  echo "installing maven"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven > /dev/null
fi
