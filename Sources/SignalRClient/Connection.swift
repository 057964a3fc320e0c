public import Foundation
internal import RealtimeCore
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// SwiftSignalRClient's low-level connection. Here the one implementation is ``HttpConnection``,
/// which ``HubConnection/init(connection:hubProtocol:logger:)`` accepts; the hub connection runs
/// this package's own transports.
public protocol Connection {
    var delegate: (any ConnectionDelegate)? { get set }
    var inherentKeepAlive: Bool { get }
    var connectionId: String? { get }
    func start()
    func send(data: Data, sendDidComplete: @escaping (_ error: (any Error)?) -> Void)
    func stop(stopError: (any Error)?)
}

/// Calls from a ``Connection``.
public protocol ConnectionDelegate: AnyObject {
    func connectionDidOpen(connection: any Connection)
    func connectionDidFailToOpen(error: any Error)
    func connectionDidReceiveData(connection: any Connection, data: Data)
    func connectionDidClose(error: (any Error)?)
    func connectionWillReconnect(error: any Error)
    func connectionDidReconnect()
}

extension ConnectionDelegate {
    /// Does nothing unless the delegate implements it.
    public func connectionWillReconnect(error: any Error) {}
    /// Does nothing unless the delegate implements it.
    public func connectionDidReconnect() {}
}

/// SwiftSignalRClient's HTTP connection: the hub URL and its options, for
/// ``HubConnection/init(connection:hubProtocol:logger:)``. It does not carry raw (non-hub)
/// messages on its own here: ``start()`` reports `connectionDidFailToOpen` with
/// ``SignalRError/invalidOperation(message:)``.
public class HttpConnection: Connection {
    let url: URL
    let options: HttpConnectionOptions
    let logger: any Logger

    /// The delegate, held weakly.
    public weak var delegate: (any ConnectionDelegate)?
    /// The id from negotiate: nil here (the hub connection negotiates).
    public private(set) var connectionId: String?
    /// Whether the transport keeps itself alive (long polling).
    public var inherentKeepAlive: Bool { false }

    /// Makes a connection to `url`.
    public convenience init(url: URL, options: HttpConnectionOptions = HttpConnectionOptions(), logger: any Logger = NullLogger()) {
        self.init(url: url, options: options, logger: logger, designated: ())
    }

    init(url: URL, options: HttpConnectionOptions, logger: any Logger, designated: Void) {
        self.url = url
        self.options = options
        self.logger = logger
    }

    static let standaloneMessage = "HttpConnection carries no raw messages on its own in this package: pass it to HubConnection(connection:hubProtocol:), or use HubConnectionBuilder"

    /// Reports `connectionDidFailToOpen` (see the type's description).
    public func start() {
        let delegate = HandOff(self.delegate)
        deliver(on: options.callbackQueue) {
            delegate.value?.connectionDidFailToOpen(error: SignalRError.invalidOperation(message: Self.standaloneMessage))
        }
    }

    /// Reports ``SignalRError/invalidOperation(message:)`` (see the type's description).
    public func send(data: Data, sendDidComplete: @escaping (_ error: (any Error)?) -> Void) {
        deliver(on: options.callbackQueue) { sendDidComplete(SignalRError.invalidOperation(message: Self.standaloneMessage)) }
    }

    /// Does nothing: it never started.
    public func stop(stopError: (any Error)? = nil) {}
}

/// SwiftSignalRClient's transport abstraction.
public protocol Transport: AnyObject {
    var delegate: (any TransportDelegate)? { get set }
    var inherentKeepAlive: Bool { get }
    func start(url: URL, options: HttpConnectionOptions)
    func send(data: Data, sendDidComplete: @escaping (_ error: (any Error)?) -> Void)
    func close()
}

/// Calls from a ``Transport``.
public protocol TransportDelegate: AnyObject {
    func transportDidOpen()
    func transportDidReceiveData(_ data: Data)
    func transportDidClose(_ error: (any Error)?)
}

/// A transport made only by the library: this package never makes one (its transports are its
/// own), so no instance exists; the type is here so code naming it compiles.
public class WebsocketsTransport: Transport {
    public weak var delegate: (any TransportDelegate)?
    public let inherentKeepAlive = false
    init() {}
    public func start(url: URL, options: HttpConnectionOptions) { delegate?.transportDidClose(SignalRError.unsupportedTransport("WebsocketsTransport")) }
    public func send(data: Data, sendDidComplete: @escaping ((any Error)?) -> Void) { sendDidComplete(SignalRError.unsupportedTransport("WebsocketsTransport")) }
    public func close() {}

    @available(*, unavailable, message: "this package's WebSocket transport is its own: nothing calls URLSession delegate methods")
    public func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?) {}
    @available(*, unavailable, message: "this package's WebSocket transport is its own: nothing calls URLSession delegate methods")
    public func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {}
    @available(*, unavailable, message: "this package's WebSocket transport is its own: nothing calls URLSession delegate methods")
    public func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?) {}
    @available(*, unavailable, message: "this package's WebSocket transport is its own: configure TLS through SignalRHub's HubConnectionOptions.tls")
    public func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {}
}

/// A transport made only by the library: this package never makes one (see
/// ``WebsocketsTransport``).
public class LongPollingTransport: Transport {
    public weak var delegate: (any TransportDelegate)?
    public let inherentKeepAlive = true
    init() {}
    public func start(url: URL, options: HttpConnectionOptions) { delegate?.transportDidClose(SignalRError.unsupportedTransport("LongPollingTransport")) }
    public func send(data: Data, sendDidComplete: @escaping ((any Error)?) -> Void) { sendDidComplete(SignalRError.unsupportedTransport("LongPollingTransport")) }
    public func close() {}
}

/// The library's bridge from a transport to its connection: no instance exists here (see
/// ``WebsocketsTransport``).
public class ConnectionTransportDelegate: TransportDelegate {
    init() {}
    public func transportDidOpen() {}
    public func transportDidReceiveData(_ data: Data) {}
    public func transportDidClose(_ error: (any Error)?) {}
}
