"""The hardware-in-the-loop link: wire protocol, transports, the host-side device and the agent."""
