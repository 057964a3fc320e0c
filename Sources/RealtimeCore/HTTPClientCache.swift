import AsyncHTTPClient
import NIOConcurrencyHelpers
import NIOCore

/// The runtime's own async-http-client clients: one per distinct TLS setting, connection
/// options and proxy, made on first use and shared. Each one:
/// - verifies TLS with the setting's `TLSConfiguration` and checks pinned keys on the connection's
///   own handshake (before the connection carries a request);
/// - does not retry failed connection attempts: a refused connection or a TLS failure fails the
///   request at once (the protocol clients have their own reconnection policy), instead of after
///   retries until the request's deadline;
/// - has no read timeout (streams may be quiet; `HTTPRequestSpec.idleTimeout` watches them);
/// - allows ``HTTPConnectionOptions/maxConnectionsPerHost`` connections per host.
final class HTTPClientCache: Sendable {
    private struct Key: Hashable {
        var tls: TLSOptions?
        var options: HTTPConnectionOptions
        var proxy: ProxyServer?
    }

    private let eventLoopGroup: any EventLoopGroup
    private let clients = NIOLockedValueBox<[Key: HTTPClient]>([:])

    init(eventLoopGroup: any EventLoopGroup) {
        self.eventLoopGroup = eventLoopGroup
    }

    deinit {
        // A client that is shutting down keeps itself alive until it is down.
        for client in clients.withLockedValue({ Array($0.values) }) {
            client.shutdown { _ in }
        }
    }

    func client(tls: TLSOptions?, options: HTTPConnectionOptions, proxy: ProxyServer?) throws -> HTTPClient {
        let key = Key(tls: tls, options: options, proxy: proxy)
        if let client = clients.withLockedValue({ $0[key] }) { return client }
        let configuration = try Self.configuration(tls: tls, options: options, proxy: proxy)
        return clients.withLockedValue { clients in
            if let existing = clients[key] { return existing }
            let client = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: configuration)
            clients[key] = client
            return client
        }
    }

    static func configuration(tls: TLSOptions?, options: HTTPConnectionOptions, proxy: ProxyServer?) throws -> HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: try tls?.makeTLSConfiguration(),
            redirectConfiguration: .follow(max: 10, allowCycles: false),
            timeout: .init(connect: TimeAmount(options.connectTimeout), read: nil),
            connectionPool: .init(
                idleTimeout: TimeAmount(options.idleTimeout),
                concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, options.maxConnectionsPerHost)),
            proxy: proxy.map(Self.ahcProxy),
            ignoreUncleanSSLShutdown: false,
            decompression: .disabled
        )
        configuration.connectionPool.retryConnectionEstablishment = false
        // Spans and propagation headers are the runtime's (its tracer), not the HTTP client's own.
        configuration.tracing.tracer = nil
        if let pins = tls?.pinnedPublicKeySHA256, !pins.isEmpty {
            configuration.http1_1ConnectionDebugInitializer = { TLSPinning.verifyConnection($0, pins: pins) }
            configuration.http2ConnectionDebugInitializer = { TLSPinning.verifyConnection($0, pins: pins) }
        }
        return configuration
    }

    /// async-http-client's description of a proxy. Requests through an HTTP proxy go on connections
    /// of ours (``HTTPProxyExchange``: async-http-client would tunnel plain http with CONNECT too,
    /// and loses a refused tunnel's status), so only SOCKS5 proxies reach it in practice.
    static func ahcProxy(_ proxy: ProxyServer) -> HTTPClient.Configuration.Proxy {
        switch proxy.kind {
        case .http:
            guard let username = proxy.username else { return .server(host: proxy.host, port: proxy.port) }
            return .server(host: proxy.host, port: proxy.port, authorization: .basic(username: username, password: proxy.password ?? ""))
        case .socks5:
            return .socksServer(host: proxy.host, port: proxy.port)
        }
    }
}
