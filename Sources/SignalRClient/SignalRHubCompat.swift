public import Foundation
@_spi(RealtimeEngine) public import RealtimeCore
@_exported public import SignalRHub
import Logging

// The shapes of the older Swift client (moozzyk/SignalR-Client-Swift, "SwiftSignalRClient"), as
// its documentation shows them: a lifecycle delegate, HttpConnectionOptions (access token
// provider, skipNegotiation, headers), callback-style invoke/send with any number of arguments,
// the ArgumentExtractor for handlers with a variable number of arguments, and the synchronous
// start() and stop(). A thin layer over HubConnection: the callbacks run on a task, not on the
// main thread. Code written for that client imports this module in place of `SwiftSignalRClient`;
// new code imports SignalRHub, whose start() and stop() are only the async ones.

/// Lifecycle callbacks of the older client. The connection holds its delegate weakly.
public protocol HubConnectionDelegate: AnyObject {
    func connectionDidOpen(hubConnection: HubConnection)
    func connectionDidFailToOpen(error: any Error)
    func connectionDidClose(error: (any Error)?)
    func connectionWillReconnect(error: any Error)
    func connectionDidReconnect()
}

extension HubConnectionDelegate {
    /// Does nothing unless the delegate implements it.
    public func connectionWillReconnect(error: any Error) {}
    /// Does nothing unless the delegate implements it.
    public func connectionDidReconnect() {}
}

/// The older client's lower-level options, set through
/// `HubConnectionBuilder/withHttpConnectionOptions(configureHttpOptions:)`.
// @unchecked Sendable: filled in by the configure closure, then read once by the builder; the
// provider closure is only called, never mutated, after that.
/// The older client's HTTP options (headers, token, negotiation), applied by
/// `withHttpConnectionOptions(configureHttpOptions:)`.
public final class HttpConnectionOptions: @unchecked Sendable {
    /// Asked before every connect and reconnect; the token goes in `Authorization: Bearer`.
    public var accessTokenProvider: () -> String? = { nil }
    /// Connect straight to the WebSocket without negotiating.
    public var skipNegotiation = false
    /// Headers sent on negotiate and on the transport's requests.
    public var headers: [String: String] = [:]
    /// Seconds to wait for the server's handshake.
    public var requestTimeout: TimeInterval = 120
    /// Makes the HTTP client that sends the negotiate request (the older client used its HTTP
    /// client for nothing else). Nil, the default, uses this package's own HTTP stack. The
    /// transports (WebSockets, and SSE / long polling when negotiated) always use this package's.
    /// The app's client sets its own headers: `headers` and the access token are not passed to it.
    public var httpClientFactory: ((HttpConnectionOptions) -> any HttpClientProtocol)?

    /// Makes a value with every default.
    public init() {}
}

/// The older client's HTTP client abstraction, used for the negotiate request when
/// ``HttpConnectionOptions/httpClientFactory`` makes one.
public protocol HttpClientProtocol {
    /// Sends a GET to `url`; calls `completionHandler` once with the response or an error.
    func get(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void)
    /// Sends a POST to `url`; calls `completionHandler` once with the response or an error.
    func post(url: URL, completionHandler: @escaping (HttpResponse?, (any Error)?) -> Void)
}

/// A response from an ``HttpClientProtocol`` client.
public final class HttpResponse: Sendable {
    /// The HTTP status.
    public let statusCode: Int
    /// The response body.
    public let contents: Data?

    /// Makes a response; every parameter is the property of the same name.
    public init(statusCode: Int, contents: Data?) {
        self.statusCode = statusCode
        self.contents = contents
    }
}

/// Reads a server invocation's arguments one at a time, for handlers whose argument count varies.
// @unchecked Sendable: made for one handler call and used only inside it (the older client's API
// hands it to a synchronous callback).
/// Reads a server invocation's arguments one by one, in order, as the older client's handlers did.
public final class ArgumentExtractor: @unchecked Sendable {
    private let arguments: [JSONValue]
    private var index = 0

    /// Makes an extractor over `arguments`, starting at the first.
    public init(arguments: [JSONValue]) {
        self.arguments = arguments
    }

    /// The next argument as `type`.
    public func getArgument<T: Decodable>(type: T.Type) throws -> T {
        guard index < arguments.count else {
            throw HubBindingError(target: "", reason: "no argument at index \(index): the invocation has \(arguments.count)")
        }
        defer { index += 1 }
        return try HubValueCoding.decode(arguments[index], as: T.self)
    }

    /// Whether an argument is left to read.
    public func hasMoreArgs() -> Bool { index < arguments.count }
}

/// Holds the delegate weakly and forwards the connection's lifecycle to it.
// @unchecked Sendable: the weak reference is set once at init; reading a weak reference is atomic.
final class WeakDelegate: HubLifecycleObserver, @unchecked Sendable {
    weak var delegate: (any HubConnectionDelegate)?
    init(_ delegate: any HubConnectionDelegate) { self.delegate = delegate }

    func didOpen(_ connection: HubConnection) { delegate?.connectionDidOpen(hubConnection: connection) }
    func didFailToOpen(_ error: any Error) { delegate?.connectionDidFailToOpen(error: error) }
    func didClose(_ error: (any Error)?) { delegate?.connectionDidClose(error: error) }
    func willReconnect(_ error: any Error) { delegate?.connectionWillReconnect(error: error) }
    func didReconnect() { delegate?.connectionDidReconnect() }
}

extension HubConnectionBuilder {
    /// The older client's entry point.
    public init(url: URL) {
        self = HubConnectionBuilder().withUrl(url: url.absoluteString)
    }

    /// The older client's logging switch (log lines go to the runtime's swift-log logger).
    public func withLogging(minLogLevel: LogLevel) -> HubConnectionBuilder {
        withLogLevel(logLevel: minLogLevel)
    }

    /// The older client's lifecycle delegate, held weakly.
    public func withHubConnectionDelegate(delegate: any HubConnectionDelegate) -> HubConnectionBuilder {
        let box = WeakDelegate(delegate)
        return withOptions { $0.lifecycleObserver = box }
    }

    /// The older client's lower-level options: token provider, skipNegotiation, headers, timeout
    /// and HTTP client factory.
    public func withHttpConnectionOptions(configureHttpOptions: (HttpConnectionOptions) -> Void) -> HubConnectionBuilder {
        let http = HttpConnectionOptions()
        configureHttpOptions(http)
        let provider = http.accessTokenProvider
        let box = UncheckedBox(provider)
        let client = http.httpClientFactory.map { UncheckedBox($0(http)) }
        return withOptions { options in
            if let client {
                options.negotiateRequest = { url in try await Self.post(url, with: client.value) }
            }
            options.skipNegotiation = http.skipNegotiation
            options.headers.merge(http.headers) { _, new in new }
            options.handshakeTimeout = .milliseconds(Int64(http.requestTimeout * 1000))
            options.accessTokenProvider = { box.value() }
            if http.skipNegotiation { options.transports = .webSockets }
        }
    }
}

extension HubConnectionBuilder {
    /// POSTs `url` through the app's client (the first answer wins if it calls back twice); a
    /// callback with neither a response nor an error is a failure.
    static func post(_ url: URL, with client: any HttpClientProtocol) async throws -> (status: Int, body: [UInt8]) {
        let reply = OneShot<HttpResponse>()
        client.post(url: url) { response, error in
            if let response, error == nil {
                reply.complete(.success(response))
            } else {
                reply.complete(.failure(error ?? RealtimeError(.protocolViolation, "the HTTP client answered neither a response nor an error")))
            }
        }
        let response = try await reply.value()
        return (response.statusCode, Array(response.contents ?? Data()))
    }
}

// @unchecked Sendable: holds the older client's non-Sendable token provider and HTTP client, which
// the connection only calls (as that client did from its own queue); the app owns their thread-safety.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

extension LogLevel {
    /// The older client's name for `LogLevel/information`.
    public static var info: LogLevel { .information }
}

extension HubConnection {
    /// The older client's non-async start: connects in the background and reports to the delegate.
    public func start() {
        background {
            do {
                try await self.start()
            } catch {
                // The delegate hears about it through connectionDidFailToOpen (see notifyDelegate).
            }
        }
    }

    /// The older client's stop.
    public func stop() {
        background { await self.stop() as Void }
    }

    /// Invokes `method` with any number of arguments and reports the result to the callback.
    public func invoke<T: Decodable>(
        method: String, arguments: [any Encodable], resultType: T.Type, invocationDidComplete: @escaping @Sendable (T?, (any Error)?) -> Void
    ) {
        let values = Result { try arguments.map { try HubValueCoding.encode($0) } }
        let completion: any InvocationCompleting = TypedCompletion(callback: invocationDidComplete)
        background {
            do {
                let value = try await self.invokeRaw(method: method, arguments: try values.get())
                completion.complete(.success(value ?? .null))
            } catch {
                completion.complete(.failure(error))
            }
        }
    }

    /// ``invoke(method:arguments:resultType:invocationDidComplete:)`` with the arguments listed.
    public func invoke<T: Decodable>(
        method: String, _ arguments: any Encodable..., resultType: T.Type, invocationDidComplete: @escaping @Sendable (T?, (any Error)?) -> Void
    ) {
        invoke(method: method, arguments: arguments, resultType: resultType, invocationDidComplete: invocationDidComplete)
    }

    /// Invokes a `void` hub method and reports completion to the callback.
    public func invoke(method: String, arguments: [any Encodable], invocationDidComplete: @escaping @Sendable ((any Error)?) -> Void) {
        let values = Result { try arguments.map { try HubValueCoding.encode($0) } }
        background {
            do {
                _ = try await self.invokeRaw(method: method, arguments: try values.get())
                invocationDidComplete(nil)
            } catch {
                invocationDidComplete(error)
            }
        }
    }

    /// Calls a hub method without waiting; the callback hears its completion or error.
    public func invoke(method: String, _ arguments: any Encodable..., invocationDidComplete: @escaping @Sendable ((any Error)?) -> Void) {
        invoke(method: method, arguments: arguments, invocationDidComplete: invocationDidComplete)
    }

    /// Sends without waiting for the server; the callback hears whether it was written.
    public func send(method: String, arguments: [any Encodable], sendDidComplete: @escaping @Sendable ((any Error)?) -> Void) {
        let values = Result { try arguments.map { try HubValueCoding.encode($0) } }
        background {
            do {
                try await self.sendRaw(method: method, arguments: try values.get())
                sendDidComplete(nil)
            } catch {
                sendDidComplete(error)
            }
        }
    }

    /// Sends without waiting for the server; the callback hears whether it was written.
    public func send(method: String, _ arguments: any Encodable..., sendDidComplete: @escaping @Sendable ((any Error)?) -> Void) {
        send(method: method, arguments: arguments, sendDidComplete: sendDidComplete)
    }

    /// A handler that reads its arguments through an ``ArgumentExtractor`` (any count).
    public func on(method: String, callback: @escaping @Sendable (ArgumentExtractor) throws -> Void) {
        on(method, rawHandler: { arguments in
            do {
                try callback(ArgumentExtractor(arguments: arguments))
            } catch {
                self.logger.warning("a client method handler threw", metadata: ["realtime.method": "\(method)", "realtime.error": "\(error)"])
            }
        })
    }

    /// The older client's typed handler.
    public func on<each Argument: Decodable>(method: String, callback: @escaping @Sendable (repeat each Argument) -> Void) {
        on(method, handler: callback)
    }

}

/// Reports an invocation's result to a typed callback. The task holds it as an existential, so the
/// task's closure does not use `T` itself: that would capture `T`'s metatype, which Swift 6 cannot
/// prove `Sendable` for every `Decodable` type.
protocol InvocationCompleting: Sendable {
    func complete(_ result: Result<JSONValue, any Error>)
}

struct TypedCompletion<T: Decodable>: InvocationCompleting {
    let callback: @Sendable (T?, (any Error)?) -> Void

    func complete(_ result: Result<JSONValue, any Error>) {
        do {
            callback(try HubValueCoding.decode(try result.get(), as: T.self), nil)
        } catch {
            callback(nil, error)
        }
    }
}

/// Runs one call of the older client's callback API. Unstructured on purpose: those calls return at
/// once and report through a callback or the delegate, so no caller waits that could own the work.
func background(_ body: @escaping @Sendable () async -> Void) {
    Task { await body() }
}
