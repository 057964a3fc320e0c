import NIOCore
import NIOPosix
import NIOSSL

/// The parts of a client connection of ours that WebSockets and event streams share: the socket's
/// options and the TLS handlers.
enum ClientConnection {
    /// A bootstrap for one connection on `eventLoop`: no Nagle delay, one read per wake-up into a
    /// receive buffer that shrinks back after a burst (``ReceiveBufferAllocator``).
    static func bootstrap(on eventLoop: any EventLoop, connectTimeout: Duration, allowRemoteHalfClosure: Bool) -> ClientBootstrap {
        ClientBootstrap(group: eventLoop)
            .connectTimeout(TimeAmount(connectTimeout))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .channelOption(ChannelOptions.allowRemoteHalfClosure, value: allowRemoteHalfClosure)
            .channelOption(ChannelOptions.maxMessagesPerRead, value: 1)
            .channelOption(ChannelOptions.recvAllocator, value: ReceiveBufferAllocator())
    }

    /// Adds TLS to `pipeline` (on its event loop): SNI with the host name (none for an IP literal,
    /// whose certificate is checked against the address), a close that does not wait for the peer's
    /// close_notify, and the pin check inside the handshake when keys are pinned.
    static func addTLS(
        to pipeline: ChannelPipeline.SynchronousOperations, context: NIOSSLContext, serverName: String, pins: [String]
    ) throws {
        let sniName = isIPLiteral(serverName) ? nil : serverName
        let shortcut = TLSCloseShortcut()
        try pipeline.addHandler(TLSCloseShortcut.SocketSide(shortcut))
        try pipeline.addHandler(NIOSSLClientHandler(context: context, serverHostname: sniName))
        try pipeline.addHandler(TLSCloseShortcut.ApplicationSide(shortcut))
        if !pins.isEmpty { try pipeline.addHandler(TLSPinGate(pins: pins)) }
    }

    static func isIPLiteral(_ host: String) -> Bool {
        let bare = host.filter { $0 != "[" && $0 != "]" }
        return (try? SocketAddress(ipAddress: bare, port: 0)) != nil
    }
}
