"""Worker processes for blocking vendor libraries: wire protocol, child loop, parent runner."""
