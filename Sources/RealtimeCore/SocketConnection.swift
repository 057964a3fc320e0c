import NIOCore
import NIOPosix
import NIOSSL

/// The parts of a client connection of ours that WebSockets and event streams share: the socket's
/// options, the connect, and the TLS handlers.
///
/// (In a whole-module build the first file that imports NIOPosix decides whether the C socket types
/// belong to the C library or to NIO's C shim: code here does not name their members, so that the
/// order of the files does not matter.)
enum SocketConnection {
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

    /// What `channel` reads into now (for tests of what a quiet connection keeps): the size of its
    /// next receive buffer (-1: not ours) and how many reads one wake-up makes.
    package static func receiveBuffer(of channel: any Channel) async throws -> (nextSize: Int, readsPerWakeUp: UInt) {
        let allocator = try await channel.getOption(ChannelOptions.recvAllocator).get()
        let reads = try await channel.getOption(ChannelOptions.maxMessagesPerRead).get()
        return ((allocator as? ReceiveBufferAllocator)?.nextSize ?? -1, reads)
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
        literalAddress(host, port: 0) != nil
    }

    /// The address of `host` when it is an IP literal (nil: a name to look up).
    static func literalAddress(_ host: String, port: Int) -> SocketAddress? {
        try? SocketAddress(ipAddress: host.filter { $0 != "[" && $0 != "]" }, port: port)
    }

    /// Connects `bootstrap` to `host`, without a name lookup when it is an IP literal. NIO looks a
    /// name up with `getaddrinfo` on Dispatch's global queue, whose few threads Swift concurrency's
    /// tasks share: in a busy process a connect to `127.0.0.1` waited seconds for a free thread.
    static func connect(_ bootstrap: ClientBootstrap, host: String, port: Int) -> EventLoopFuture<any Channel> {
        if let address = literalAddress(host, port: port) { return bootstrap.connect(to: address) }
        return bootstrap.connect(host: host, port: port)
    }

    /// ``connect(_:host:port:)`` with NIO's typed channel initializer.
    static func connect<Output: Sendable>(
        _ bootstrap: ClientBootstrap, host: String, port: Int,
        channelInitializer: @escaping @Sendable (any Channel) -> EventLoopFuture<Output>
    ) async throws -> Output {
        if let address = literalAddress(host, port: port) {
            return try await bootstrap.connect(to: address, channelInitializer: channelInitializer)
        }
        return try await bootstrap.connect(host: host, port: port, channelInitializer: channelInitializer)
    }
}
