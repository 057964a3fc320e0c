# Sourced by Scripts/test.sh and Scripts/tsan.sh: installs what the tests need on a fresh Linux
# machine and exports REALTIME_PYTHON.
#   - Debian packages: openssl (test certificates), zlib1g-dev (permessage-deflate), libssl-dev,
#     python3-venv (interop peers), tinyproxy-bin and dante-server (proxy tests). Installed with
#     apt-get only when missing.
#   - .venv/: a Python virtual environment with the pinned interop peers from Scripts/requirements.txt.
#   - .venv-sio2/: the socket.io 2.x peer (python-socketio 4.6.1, python-engineio 3.14.2) from
#     Scripts/requirements-sio2.txt, apart because it conflicts with the 5.x peer. Exports
#     REALTIME_PYTHON_SIO2.
need_apt=()
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
[ -f /usr/include/openssl/ssl.h ] || need_apt+=(libssl-dev)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# Real proxies for the proxy tests: tinyproxy (HTTP CONNECT, Basic auth) and dante (SOCKS5). The
# tests start their own instances on free ports; the packages' services are not used.
[ -x /usr/bin/tinyproxy ] || need_apt+=(tinyproxy-bin)
[ -x /usr/sbin/danted ] || need_apt+=(dante-server)
# squid with Debian's stock rules (CONNECT to 443 only), and curl as the reference for the proxy
# environment rules.
[ -x /usr/sbin/squid ] || need_apt+=(squid)
[ -x /usr/bin/curl ] || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo [prepare] "installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ -f Scripts/requirements.txt ]; then
  if [ ! -x .venv/bin/python ] || ! cmp -s Scripts/requirements.txt .venv/.requirements 2>/dev/null; then
    echo [prepare] "creating .venv with the pinned interop peers (Scripts/requirements.txt)"
    rm -rf .venv
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -r Scripts/requirements.txt
    cp Scripts/requirements.txt .venv/.requirements
  fi
  export REALTIME_PYTHON="$PWD/.venv/bin/python"
fi

if [ -f Scripts/requirements-sio2.txt ]; then
  if [ ! -x .venv-sio2/bin/python ] || ! cmp -s Scripts/requirements-sio2.txt .venv-sio2/.requirements 2>/dev/null; then
    echo [prepare] "creating .venv-sio2 with the socket.io 2.x peer (Scripts/requirements-sio2.txt)"
    rm -rf .venv-sio2
    python3 -m venv .venv-sio2
    .venv-sio2/bin/pip install --quiet --disable-pip-version-check -r Scripts/requirements-sio2.txt
    cp Scripts/requirements-sio2.txt .venv-sio2/.requirements
  fi
  export REALTIME_PYTHON_SIO2="$PWD/.venv-sio2/bin/python"
fi
