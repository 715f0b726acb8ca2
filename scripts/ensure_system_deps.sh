#!/usr/bin/env bash
# Make sure the system tools fold-inspector needs are present.
#
#   scripts/ensure_system_deps.sh [dot] [chromium]
#
# A tool that is already present is left alone. A missing one is installed with
# apt-get when running as root; otherwise the script says what to install and
# exits 1.
set -euo pipefail

apt_updated=0
missing=0

# The Debian package that provides a tool.
package_for() {
    case "$1" in
        dot) echo graphviz ;;
        chromium) echo chromium ;;
    esac
}

is_present() {
    case "$1" in
        dot) command -v dot >/dev/null 2>&1 ;;
        # Playwright launches this exact path (it cannot download a browser here).
        chromium) [ -x /usr/bin/chromium ] ;;
    esac
}

for tool in "$@"; do
    case "$tool" in
        dot | chromium) ;;
        *)
            echo "usage: $0 [dot] [chromium] (unknown tool: $tool)" >&2
            exit 2
            ;;
    esac

    if is_present "$tool"; then
        continue
    fi

    package="$(package_for "$tool")"
    if [ "$(id -u)" -eq 0 ]; then
        if [ "$apt_updated" -eq 0 ]; then
            apt-get update -qq
            apt_updated=1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package"
        if ! is_present "$tool"; then
            echo "fold-inspector needs $tool: installing '$package' did not provide it" >&2
            exit 1
        fi
    else
        echo "fold-inspector needs $tool: run 'sudo apt-get install -y $package'" >&2
        missing=1
    fi
done

exit "$missing"
