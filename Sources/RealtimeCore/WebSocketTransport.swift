public import NIOCore
import HTTPTypes
import NIOHTTP1
import NIOConcurrencyHelpers
import NIOSSL
import NIOWebSocket
import WSClient
import WSCompression
public import WSCore

/// A live WebSocket connection, valid inside the closure given to ``WebSocketTransport/connect(to:configuration:runtime:_:)``.
public struct WebSocketConnection: Sendable {
    /// The messages the server sends, reassembled from frames.
    public let inbound: WebSocketMessages
    let outbound: WebSocketOutboundWriter
    let closeRequested: NIOLockedValueBox<Bool>

    /// Sends one message; returns once it is written to the socket (this is the backpressure).
    public func send(_ message: RealtimeMessage) async throws {
        switch message {
        case .text(let text): try await outbound.write(.text(text))
        case .binary(let buffer): try await outbound.write(.binary(buffer))
        }
    }

    public func send(text: String) async throws { try await outbound.write(.text(text)) }
    public func send(binary: ByteBuffer) async throws { try await outbound.write(.binary(binary)) }

    /// Starts the closing handshake. The inbound sequence ends when the server answers.
    public func close(code: UInt16 = 1000, reason: String? = nil) async throws {
        closeRequested.withLockedValue { $0 = true }
        try await outbound.close(WebSocketErrorCode(codeNumber: Int(code)), reason: reason)
    }
}

/// The inbound side of a ``WebSocketConnection``: complete messages, in order.
public struct WebSocketMessages: AsyncSequence, Sendable {
    public typealias Element = RealtimeMessage
    let base: WebSocketInboundMessageStream
    let outbound: WebSocketOutboundWriter
    let maxMessageSize: Int

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: WebSocketInboundMessageStream.AsyncIterator
        let outbound: WebSocketOutboundWriter
        let maxMessageSize: Int

        public mutating func next() async throws -> RealtimeMessage? {
            let message: RealtimeMessage
            let size: Int
            switch try await base.next() {
            case .none: return nil
            case .text(let text):
                size = text.utf8.count
                message = .text(text)
            case .binary(let buffer):
                size = buffer.readableBytes
                message = .binary(buffer)
            }
            if size > maxMessageSize {
                try? await outbound.close(.messageTooLarge, reason: nil)
                throw RealtimeError(.messageTooLarge, "the server sent a \(size)-byte message; maxMessageSize is \(maxMessageSize)", closeCode: 1009)
            }
            return message
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), outbound: outbound, maxMessageSize: maxMessageSize)
    }
}

/// WebSocket connections on swift-websocket's `WSClient`: ws and wss, headers, subprotocols,
/// permessage-deflate, message size limits, automatic ping, and close codes surfaced as errors.
public enum WebSocketTransport {
    /// Connects, runs `body` with the connection, and closes it when `body` returns.
    ///
    /// - Returns: how the server closed the connection, if it sent a close frame.
    /// - Throws: ``RealtimeError`` for connection, TLS and protocol failures (`invalidURL`,
    ///   `connectFailed`, `tlsFailure`, `certificatePinMismatch`, `timeout`, `messageTooLarge`,
    ///   `invalidUTF8`, `protocolViolation`), and whatever `body` throws.
    @discardableResult
    public static func connect(
        to url: String,
        configuration: WebSocketConfiguration = .init(),
        runtime: RealtimeRuntime = .shared,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        let target = try Endpoint(url, allowedSchemes: ["ws", "wss", "http", "https"])
        let tlsConfiguration: TLSConfiguration? = target.isSecure ? try configuration.tls.makeTLSConfiguration() : nil
        if target.isSecure {
            try await TLSPinning.verify(host: target.host, port: target.port, options: configuration.tls, runtime: runtime)
        }
        var clientConfiguration = WebSocketClientConfiguration(
            // Frames up to twice the limit are read so an oversized message gets a precise error
            // (close 1009 + messageTooLarge); larger frames are cut off by the frame decoder.
            maxFrameSize: configuration.maxMessageSize.multipliedReportingOverflow(by: 2).overflow ? .max : configuration.maxMessageSize * 2,
            additionalHeaders: HTTPFields(configuration.headers),
            extensions: configuration.compression
                ? [.perMessageDeflate(maxDecompressedFrameSize: configuration.maxMessageSize)] : [],
            closeTimeout: configuration.closeTimeout,
            autoPing: configuration.autoPing.map { .enabled(timePeriod: $0) } ?? .disabled,
            validateUTF8: configuration.validateUTF8,
            sniHostname: configuration.tls.serverName
        )
        if !configuration.subprotocols.isEmpty {
            clientConfiguration.additionalHeaders[HTTPField.Name.secWebSocketProtocol] = configuration.subprotocols.joined(separator: ", ")
        }
        let eventLoop = runtime.eventLoopGroup.next()
        let phase = NIOLockedValueBox(ConnectPhase.connecting)
        let closeRequested = NIOLockedValueBox(false)
        let maxMessageSize = configuration.maxMessageSize
        let finalConfiguration = clientConfiguration
        let closeFrame: WebSocketCloseFrame?
        do {
            closeFrame = try await Deadline.run(
                within: configuration.connectTimeout,
                runtime: runtime,
                isPastDeadlinePhase: { phase.withLockedValue { $0 == .open } },
                abandon: { phase.withLockedValue { $0 = .abandoned } },
                timeoutError: RealtimeError.timeout("the WebSocket connection to \(Redaction.url(url)) was not open within \(configuration.connectTimeout)")
            ) {
                let client = WebSocketClient(
                    url: target.webSocketURL,
                    configuration: finalConfiguration,
                    tlsConfiguration: tlsConfiguration,
                    eventLoopGroup: eventLoop,
                    logger: runtime.logger
                ) { inbound, outbound, _ in
                    let abandoned = phase.withLockedValue { phase -> Bool in
                        if phase == .abandoned { return true }
                        phase = .open
                        return false
                    }
                    if abandoned { return }
                    let connection = WebSocketConnection(
                        inbound: WebSocketMessages(base: inbound.messages(maxSize: maxMessageSize), outbound: outbound, maxMessageSize: maxMessageSize),
                        outbound: outbound, closeRequested: closeRequested)
                    // The body reads and writes on the connection's own event loop: no thread hop per message.
                    try await withEventLoopPreference(eventLoop) { try await body(connection) }
                }
                return try await client.run()
            }
        } catch {
            throw mapError(error, url: url)
        }
        guard let closeFrame else {
            if closeRequested.withLockedValue({ $0 }) { return nil }
            throw RealtimeError(
                .connectionClosed, "the WebSocket connection ended without a close frame (abnormal closure)", closeCode: 1006)
        }
        let info = WebSocketCloseInfo(code: UInt16(webSocketErrorCode: closeFrame.closeCode), reason: closeFrame.reason)
        switch closeFrame.closeCode {
        case .normalClosure, .goingAway:
            return info
        default:
            throw RealtimeError(
                .webSocketClosed, "the server closed the WebSocket", serverMessage: info.reason, closeCode: info.code)
        }
    }

    private enum ConnectPhase: Sendable { case connecting, open, abandoned }

    static func mapError(_ error: any Error, url: String) -> any Error {
        switch error {
        case let error as RealtimeError:
            return error
        case let error as WebSocketClientError:
            switch error {
            case .invalidURL: return RealtimeError.invalidURL(url)
            case .serverSentMessageTooLarge:
                return RealtimeError(.messageTooLarge, "the server sent a message larger than maxMessageSize", underlying: error)
            case .serverSentDataInconsistentWithMessage:
                return RealtimeError(.invalidUTF8, "the server sent a text message that is not valid UTF-8", underlying: error)
            case .webSocketUpgradeFailed:
                return RealtimeError(.connectFailed, "the server refused the WebSocket upgrade at \(Redaction.url(url))", underlying: error)
            default:
                return RealtimeError(.protocolViolation, "WebSocket protocol error", underlying: error)
            }
        case is CancellationError:
            return error
        case let error where TLSErrorDetection.isTLSFailure(error):
            return RealtimeError(.tlsFailure, "TLS handshake with \(Redaction.url(url)) failed", underlying: error)
        default:
            return RealtimeError(.connectFailed, "could not connect to \(Redaction.url(url))", underlying: error)
        }
    }
}

extension HTTPFields {
    init(_ headers: HTTPHeaders) {
        self.init()
        for header in headers {
            let (name, value) = (header.name, header.value)
            if let field = HTTPField.Name(name) { self.append(HTTPField(name: field, value: value)) }
        }
    }
}
