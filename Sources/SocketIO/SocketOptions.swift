public import Foundation
#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif
internal import Logging
internal import NIOHTTP1
public import RealtimeCore
internal import SocketIOEngine

/// Starscream's certificate pinning; this client has no Starscream.
@available(*, unavailable, message: "Starscream's pinning is not carried: pin with .tls(TLSOptions(pinnedPublicKeySHA256: [...]))")
public final class CertificatePinning {}

/// One option of a manager, client or engine.
// @unchecked Sendable: the cases hold the options' values as given (`[String: Any]`, a logger,
// a queue); the manager reads them when it applies them, under its lock.
public enum SocketIOClientOption: ClientOption, @unchecked Sendable {
    /// Ask for permessage-deflate on the WebSocket.
    case compress
    /// Query parameters sent with every request.
    case connectParams([String: Any])
    /// Cookies sent with every request.
    case cookies([HTTPCookie])
    /// Headers sent with every request.
    case extraHeaders([String: String])
    /// Open a new Engine.IO connection on every connect (always the case here).
    case forceNew(Bool)
    /// Use long polling only.
    case forcePolling(Bool)
    /// Use the WebSocket only.
    case forceWebsockets(Bool)
    /// SOCKS proxy (no effect, as in the original 16.1.1).
    case enableSOCKSProxy(Bool)
    /// The queue every handler, ack callback, timeout and completion runs on (serial; main by default).
    case handleQueue(DispatchQueue)
    /// Log to ``DefaultSocketLogger``.
    case log(Bool)
    /// Replace the logger.
    case logger(any SocketLogger)
    /// The Engine.IO path (default `/socket.io/`).
    case path(String)
    /// Reconnect after a drop (default true).
    case reconnects(Bool)
    /// Attempts before giving up (-1, the default: no limit).
    case reconnectAttempts(Int)
    /// Seconds before the first attempt (default 10).
    case reconnectWait(Int)
    /// The longest wait between attempts, in seconds (default 30).
    case reconnectWaitMax(Int)
    /// The jitter of the waits (default 0.5).
    case randomizationFactor(Double)
    /// Use TLS.
    case secure(Bool)
    /// Starscream certificate pinning.
    @available(*, unavailable, message: "Starscream's pinning is not carried: pin with .tls(TLSOptions(pinnedPublicKeySHA256: [...]))")
    case security(CertificatePinning)
    /// No effect, as in socket.io-client-swift 16 (which stored it and never read it): the
    /// server's certificate is always checked. To trust a test server's own certificate, give its
    /// CA with `.tls(TLSOptions(trustRoots: .pem(...)))`.
    case selfSigned(Bool)
    /// A URLSession delegate for the polling requests.
    @available(*, unavailable, message: "there is no URLSession: set trust roots, pinning or a client certificate with .tls(TLSOptions(...))")
    case sessionDelegate(any URLSessionDelegate)
    /// The TLS settings of every connection (`https`/`wss`): trust roots, pinned keys, a client
    /// certificate. This client's own option (the original's TLS went through Starscream's pinning
    /// and the URLSession delegate).
    case tls(TLSOptions)
    /// Starscream's custom engine flag (no effect: there is no Starscream).
    case useCustomEngine(Bool)
    /// The server's generation (default `.three`).
    case version(SocketIOVersion)

    /// The case's name.
    public var description: String {
        switch self {
        case .compress: "compress"
        case .connectParams: "connectParams"
        case .cookies: "cookies"
        case .extraHeaders: "extraHeaders"
        case .forceNew: "forceNew"
        case .forcePolling: "forcePolling"
        case .forceWebsockets: "forceWebsockets"
        case .enableSOCKSProxy: "enableSOCKSProxy"
        case .handleQueue: "handleQueue"
        case .log: "log"
        case .logger: "logger"
        case .path: "path"
        case .reconnects: "reconnects"
        case .reconnectAttempts: "reconnectAttempts"
        case .reconnectWait: "reconnectWait"
        case .reconnectWaitMax: "reconnectWaitMax"
        case .randomizationFactor: "randomizationFactor"
        case .secure: "secure"
        case .selfSigned: "selfSigned"
        case .tls: "tls"
        case .useCustomEngine: "customEngine"
        case .version: "version"
        }
    }

    /// Whether both are the same option (the case's name; values are not compared).
    public static func == (lhs: SocketIOClientOption, rhs: SocketIOClientOption) -> Bool { lhs.description == rhs.description }

    /// The option of a dictionary entry (the Objective-C style configuration).
    static func from(key: String, value: Any) -> SocketIOClientOption? {
        switch (key, value) {
        case ("compress", let flag as Bool): flag ? .compress : nil
        case ("connectParams", let params as [String: Any]): .connectParams(params)
        case ("cookies", let cookies as [HTTPCookie]): .cookies(cookies)
        case ("extraHeaders", let headers as [String: String]): .extraHeaders(headers)
        case ("forceNew", let flag as Bool): .forceNew(flag)
        case ("forcePolling", let flag as Bool): .forcePolling(flag)
        case ("forceWebsockets", let flag as Bool): .forceWebsockets(flag)
        case ("enableSOCKSProxy", let flag as Bool): .enableSOCKSProxy(flag)
        case ("handleQueue", let queue as DispatchQueue): .handleQueue(queue)
        case ("log", let flag as Bool): .log(flag)
        case ("logger", let logger as any SocketLogger): .logger(logger)
        case ("path", let path as String): .path(path)
        case ("reconnects", let flag as Bool): .reconnects(flag)
        case ("reconnectAttempts", let count as Int): .reconnectAttempts(count)
        case ("reconnectWait", let seconds as Int): .reconnectWait(seconds)
        case ("reconnectWaitMax", let seconds as Int): .reconnectWaitMax(seconds)
        case ("randomizationFactor", let factor as Double): .randomizationFactor(factor)
        case ("secure", let flag as Bool): .secure(flag)
        case ("selfSigned", let flag as Bool): .selfSigned(flag)
        case ("version", let number as Int): SocketIOVersion(rawValue: number).map { .version($0) }
        default: nil
        }
    }
}

/// An option type (the original's internal `ClientOption`, public here because the option
/// conforms to it).
public protocol ClientOption: CustomStringConvertible, Equatable {}

/// The options of a manager: a collection of ``SocketIOClientOption``, written as an array literal.
public struct SocketIOClientConfiguration: ExpressibleByArrayLiteral, Collection, MutableCollection, @unchecked Sendable {
    // @unchecked Sendable: see SocketIOClientOption.

    /// The options' type.
    public typealias Element = SocketIOClientOption
    /// Positions.
    public typealias Index = Array<SocketIOClientOption>.Index
    /// The iterator.
    public typealias Iterator = Array<SocketIOClientOption>.Iterator
    /// A slice.
    public typealias SubSequence = Array<SocketIOClientOption>.SubSequence

    private var backingArray: [SocketIOClientOption] = []

    /// The options of an array literal.
    public init(arrayLiteral elements: Element...) { backingArray = elements }

    /// The first position.
    public var startIndex: Index { backingArray.startIndex }
    /// Past the last position.
    public var endIndex: Index { backingArray.endIndex }
    /// Whether there is no option.
    public var isEmpty: Bool { backingArray.isEmpty }
    /// The number of options.
    public var count: Index.Stride { backingArray.count }
    /// The first option.
    public var first: Element? { backingArray.first }

    /// The option at `position`.
    public subscript(position: Index) -> Element {
        get { backingArray[position] }
        set { backingArray[position] = newValue }
    }

    /// The options in `bounds`.
    public subscript(bounds: Range<Index>) -> SubSequence {
        get { backingArray[bounds] }
        set { backingArray[bounds] = newValue }
    }

    /// The position after `i`.
    public func index(after i: Index) -> Index { backingArray.index(after: i) }

    /// Iterates the options.
    public func makeIterator() -> Iterator { backingArray.makeIterator() }

    /// Adds `element`; with `replace` (the default) an option of the same case is replaced in place.
    public mutating func insert(_ element: Element, replacing replace: Bool = true) {
        if replace, let index = backingArray.firstIndex(where: { $0 == element }) {
            backingArray[index] = element
        } else {
            backingArray.append(element)
        }
    }

    /// The options of a dictionary (`["log": true, "connectParams": [...]]`).
    init(dictionary: [String: Any]) {
        for key in dictionary.keys.sorted() {
            if let option = SocketIOClientOption.from(key: key, value: dictionary[key]!) { insert(option) }
        }
    }
}

/// The settings a manager applies, read from its options.
struct ManagerSettings {
    var handleQueue: DispatchQueue = .main
    var reconnects = true
    var reconnectAttempts = -1
    var reconnectWait = 10
    var reconnectWaitMax = 30
    var randomizationFactor = 0.5
    var forceNew = false
    var version: SocketIOVersion = .three
    var secure = false
    var path = "/socket.io/"
    var compress = false
    var forcePolling = false
    var forceWebsockets = false
    var connectParams: [String: Any]? = nil
    var extraHeaders: [String: String]? = nil
    var cookies: [HTTPCookie]? = nil
    var tls: TLSOptions? = nil
    var log = false

    mutating func apply(_ config: SocketIOClientConfiguration) {
        for option in config {
            switch option {
            case .compress: compress = true
            case .connectParams(let params): connectParams = params
            case .cookies(let list): cookies = list
            case .extraHeaders(let headers): extraHeaders = headers
            case .forceNew(let flag): forceNew = flag
            case .forcePolling(let flag): forcePolling = flag
            case .forceWebsockets(let flag): forceWebsockets = flag
            case .enableSOCKSProxy, .useCustomEngine: break
            case .handleQueue(let queue): handleQueue = queue
            case .log(let flag): log = flag; DefaultSocketLogger.Logger.log = flag
            case .logger(let logger): DefaultSocketLogger.Logger = logger
            case .path(let value): path = value.hasSuffix("/") ? value : value + "/"
            case .reconnects(let flag): reconnects = flag
            case .reconnectAttempts(let count): reconnectAttempts = count
            case .reconnectWait(let seconds): reconnectWait = abs(seconds)
            case .reconnectWaitMax(let seconds): reconnectWaitMax = abs(seconds)
            case .randomizationFactor(let factor): randomizationFactor = factor
            case .secure(let flag): secure = flag
            case .selfSigned: break  // no effect, as in the original
            case .tls(let options): tls = options
            case .version(let value): version = value
            }
        }
    }

    /// SocketIOEngine's URL and configuration for these settings.
    func engineConfiguration(for url: URL) -> (String, SocketIOConfiguration) {
        var configuration = SocketIOConfiguration()
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        if secure {
            if components?.scheme == "http" { components?.scheme = "https" }
            if components?.scheme == "ws" { components?.scheme = "wss" }
        }
        components?.path = ""
        components?.query = nil
        let base = components?.url?.absoluteString ?? url.absoluteString
        configuration.version = version == .two ? .v2 : .v3
        configuration.engine.path = path
        configuration.engine.compression = compress
        for (key, value) in connectParams ?? [:] { configuration.engine.query[key] = "\(value)" }
        for (name, value) in extraHeaders ?? [:] { configuration.engine.headers.replaceOrAdd(name: name, value: value) }
        if let cookies, !cookies.isEmpty {
            configuration.engine.headers.replaceOrAdd(name: "Cookie", value: cookies.map { "\($0.name)=\($0.value)" }.joined(separator: "; "))
        }
        if forcePolling {
            configuration.engine.transports = [.polling]
            configuration.engine.upgrade = false
        } else if forceWebsockets {
            configuration.engine.transports = [.websocket]
            configuration.engine.upgrade = false
        }
        if let tls { configuration.engine.tls = tls }
        configuration.reconnection = reconnects
        configuration.reconnectionAttempts = reconnectAttempts < 0 ? nil : reconnectAttempts
        configuration.reconnectionDelay = .seconds(reconnectWait)
        configuration.reconnectionDelayMax = .seconds(max(reconnectWait, reconnectWaitMax))
        configuration.randomizationFactor = randomizationFactor
        // Emits made while not connected are dropped with an error, as in the original; the
        // engine's offline queue is not used.
        if log {
            var logger = Logger(label: "SocketIO")
            logger.logLevel = .debug
            configuration.runtime = configuration.runtime.logging(to: logger)
        }
        return (base, configuration)
    }
}

/// The TLS settings of ``SocketIOClientOption/tls(_:)``: trust roots, pinned public keys, a client
/// certificate, the server name (RealtimeCore's `TLSOptions`, named here so that code importing
/// only this module can make one).
public typealias TLSOptions = RealtimeCore.TLSOptions
