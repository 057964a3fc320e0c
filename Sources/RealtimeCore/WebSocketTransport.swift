public import NIOCore
import HTTPTypes
import Logging
import NIOHTTP1
import NIOConcurrencyHelpers
import NIOWebSocket
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(WSInternal) import WSCore

/// A live WebSocket connection, valid inside the closure given to ``WebSocketTransport/connect(to:configuration:runtime:_:)``.
// A class: the connection is held by every async frame between the connect and the reader of its
// messages, for the connection's whole life; as a struct each of them kept a copy of its 200 bytes.
public final class WebSocketConnection: Sendable {
    /// The messages the server sends, reassembled from frames.
    public let inbound: WebSocketMessages
    let outbound: Outbound
    let closeRequested: NIOLockedValueBox<Bool>
    /// The server's answer to the upgrade: status, headers, chosen subprotocol and extensions.
    public let upgradeResponse: WebSocketUpgradeResponse
    let keepAliveCountsBox: NIOLockedValueBox<WebSocketKeepAliveCounts>
    /// Pings the keep-alive sent and pongs it received so far.
    package var keepAliveCounts: WebSocketKeepAliveCounts { keepAliveCountsBox.withLockedValue { $0 } }
    let protocolPingSender: ProtocolPingSender?
    /// Writes whole messages on the event loop, beside ``send(_:)``; nil when the connection
    /// negotiated an extension (permessage-deflate), whose frames must go through ``send(_:)``.
    package let loopWriter: WebSocketLoopWriter?
    /// How long ``close(code:reason:)`` waits for the server's answer before it closes the TCP
    /// connection (``WebSocketConfiguration/closeTimeout``).
    let closeTimeout: Duration
    /// Closes the TCP connection after ``closeTimeout`` (permessage-deflate connections; ours arm
    /// the read handler's timer).
    let closeDeadline: (@Sendable () -> Void)?
    /// Closes the TCP connection at once (permessage-deflate connections).
    let abortFrames: (@Sendable () -> Void)?

    init(
        inbound: WebSocketMessages, outbound: Outbound, closeRequested: NIOLockedValueBox<Bool>, upgradeResponse: WebSocketUpgradeResponse,
        keepAliveCountsBox: NIOLockedValueBox<WebSocketKeepAliveCounts>, protocolPingSender: ProtocolPingSender?,
        loopWriter: WebSocketLoopWriter?, closeTimeout: Duration, closeDeadline: (@Sendable () -> Void)?, abortFrames: (@Sendable () -> Void)?
    ) {
        self.inbound = inbound
        self.outbound = outbound
        self.closeRequested = closeRequested
        self.upgradeResponse = upgradeResponse
        self.keepAliveCountsBox = keepAliveCountsBox
        self.protocolPingSender = protocolPingSender
        self.loopWriter = loopWriter
        self.closeTimeout = closeTimeout
        self.closeDeadline = closeDeadline
        self.abortFrames = abortFrames
    }

    /// Writes the protocol's own keep-alive message (``WebSocketConfiguration/protocolPing``) on the
    /// event loop, without waiting and outside the send order (between two messages); returns false
    /// when the configuration has none.
    @discardableResult
    package func sendProtocolPing() -> Bool {
        guard let protocolPingSender else { return false }
        protocolPingSender.send()
        return true
    }

    /// Who writes the connection's frames.
    enum Outbound: Sendable {
        /// Our handlers on the event loop.
        case loop(WebSocketLoopWriter, WebSocketLoopReader)
        /// swift-websocket's writer (a connection with permessage-deflate).
        case frames(WebSocketOutboundWriter)
    }

    /// Sends one message; returns once it is written to the socket (this is the backpressure).
    public func send(_ message: RealtimeMessage) async throws {
        switch (outbound, message) {
        case (.loop(let writer, _), _): try await writer.send(message)
        case (.frames(let writer), .text(let text)): try await writer.write(.text(text))
        case (.frames(let writer), .binary(let buffer)): try await writer.write(.binary(buffer))
        }
    }

    /// Sends a text frame; returns once it was written to the socket (waits while the socket is full).
    public func send(text: String) async throws { try await send(.text(text)) }
    /// Sends a binary frame; returns once it was written to the socket (waits while the socket is full).
    public func send(binary: ByteBuffer) async throws { try await send(.binary(binary)) }

    /// Ends the connection now, from any thread, without waiting for the server: our close frame
    /// (1000) unless one went out, then the TCP connection closed. The inbound sequence ends.
    package func abort() {
        closeRequested.withLockedValue { $0 = true }
        switch outbound {
        case .loop(_, let reader): reader.abort()
        case .frames: abortFrames?()
        }
    }

    /// Starts the closing handshake. The inbound sequence ends when the server answers, or after
    /// ``WebSocketConfiguration/closeTimeout`` when it does not (the TCP connection is closed then).
    public func close(code: UInt16 = 1000, reason: String? = nil) async throws {
        closeRequested.withLockedValue { $0 = true }
        switch outbound {
        case .loop(_, let reader): try await reader.close(code: code, reason: reason, timeout: closeTimeout)
        case .frames(let writer):
            closeDeadline?()
            try await writer.close(WebSocketErrorCode(codeNumber: Int(code)), reason: reason)
        }
    }
}

/// A whole message as the reader took it off a WebSocket: a text message's bytes (UTF-8, checked
/// when the connection checks it) or a binary message's. The protocols' readers parse the bytes;
/// ``WebSocketMessages`` makes the `String` of a text message for code that asks for one.
package enum WebSocketInbound: Sendable {
    case text(ByteBuffer)
    case binary(ByteBuffer)

    /// The message's bytes, text or binary.
    package var bytes: ByteBuffer {
        switch self {
        case .text(let bytes), .binary(let bytes): bytes
        }
    }

    /// The message as the public API gives it.
    package var message: RealtimeMessage {
        switch self {
        case .text(let bytes): .text(bytes.withUnsafeReadableBytes { String(decoding: $0, as: UTF8.self) })
        case .binary(let bytes): .binary(bytes)
        }
    }
}

/// The inbound side of a ``WebSocketConnection``: complete messages, in order.
///
/// Fragments are reassembled here, with the size limit checked as each frame arrives (a message
/// that grows past ``WebSocketConfiguration/maxMessageSize`` closes the connection with 1009 and
/// fails with `messageTooLarge`) and text checked for UTF-8 (1007 and `invalidUTF8`).
public struct WebSocketMessages: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = RealtimeMessage
    enum Source: Sendable {
        /// Decoded on the event loop (``WebSocketReadHandler``).
        case loop(InboundBuffer<WebSocketInbound>)
        /// Frames from swift-websocket's handler, reassembled here.
        case frames(WebSocketInboundStream, WebSocketOutboundWriter, maxMessageSize: Int, validateUTF8: Bool)
    }
    let source: Source
    let url: String

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var loop: InboundBuffer<WebSocketInbound>.Iterator?
        // Behind a reference: a connection's task keeps its iterator for the connection's life,
        // and the frame reader of a compressed connection is four times the size of the other.
        let frames: FrameReaderBox?
        let url: String

        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async throws -> RealtimeMessage? {
            if loop != nil {
                do {
                    return try await loop!.next()?.message
                } catch {
                    throw WebSocketTransport.mapError(error, url: url, established: true)
                }
            }
            return try await frames?.reader.next()?.message
        }

        /// The messages one read brought (at least one; what ``next()`` left of them first), or nil
        /// once the sequence ended. The protocols' reading loops take messages this way: an async
        /// call per message switches executors even when nothing waits. A text message comes as
        /// its bytes, so that a protocol that parses them makes no `String` of the whole message.
        package mutating func nextRead() async throws -> ArraySlice<WebSocketInbound>? {
            if loop != nil {
                do {
                    return try await loop!.nextBatch()
                } catch {
                    throw WebSocketTransport.mapError(error, url: url, established: true)
                }
            }
            return try await frames?.reader.next().map { [$0][...] }
        }
    }

    final class FrameReaderBox {
        var reader: FrameReader
        init(_ reader: FrameReader) { self.reader = reader }
    }

    /// Reassembles messages from swift-websocket's frames (a connection with permessage-deflate).
    struct FrameReader {
        var base: WebSocketInboundStream.AsyncIterator
        let outbound: WebSocketOutboundWriter
        var assembler: MessageAssembler
        let url: String

        mutating func next() async throws -> WebSocketInbound? {
            while true {
                let frame: WebSocketDataFrame?
                do {
                    frame = try await base.next()
                } catch {
                    throw WebSocketTransport.mapError(error, url: url, established: true)
                }
                guard let frame else {
                    return nil
                }
                let opcode: WebSocketOpcode = switch frame.opcode {
                case .text: .text
                case .binary: .binary
                case .continuation: .continuation
                }
                switch assembler.add(opcode: opcode, fin: frame.fin, data: frame.data) {
                case .partial:
                    continue
                case .message(let message):
                    return message
                case .failure(let error):
                    try? await outbound.close(WebSocketErrorCode(codeNumber: Int(error.closeCode ?? 1002)), reason: nil)
                    throw error
                }
            }
        }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        switch source {
        case .loop(let buffer):
            return AsyncIterator(loop: InboundBuffer.Iterator(buffer), frames: nil, url: url)
        case .frames(let base, let outbound, let maxMessageSize, let validateUTF8):
            let reader = FrameReader(
                base: base.makeAsyncIterator(), outbound: outbound,
                assembler: MessageAssembler(maxMessageSize: maxMessageSize, validateUTF8: validateUTF8), url: url)
            return AsyncIterator(loop: nil, frames: FrameReaderBox(reader), url: url)
        }
    }
}

/// WebSocket client connections: ws and wss, headers, subprotocols, permessage-deflate, cookies,
/// message size limits, automatic ping, and close codes surfaced as errors.
///
/// The handshake is ours (`WebSocketClientChannel`, on swift-nio's upgrader and frame codec and
/// swift-nio-ssl), and so is the frame protocol after the upgrade (`WebSocketReadHandler`, on the
/// event loop: control frames, the closing handshake, fragmentation, UTF-8 checks, backpressure);
/// a connection with permessage-deflate runs swift-websocket's `WSCore` handler instead. See
/// Docs/Architecture.md, "WebSocket", for why and what that costs.
public enum WebSocketTransport {
    /// Connects, runs `body` with the connection, and closes it when `body` returns.
    ///
    /// - Returns: how the server closed the connection, if it sent a close frame.
    /// - Throws: ``RealtimeError`` for connection, TLS and protocol failures (`invalidURL`,
    ///   `connectFailed`, `tlsFailure`, `certificatePinMismatch`, `badStatus` with the status and a
    ///   body excerpt for a refused upgrade, `timeout`, `messageTooLarge`, `invalidUTF8`,
    ///   `protocolViolation`), and whatever `body` throws. Whatever fails, the socket is closed.
    @discardableResult
    public static func connect(
        to url: String,
        configuration: WebSocketConfiguration = .init(),
        runtime: RealtimeRuntime = .shared,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        try await connect(to: url, runtime: runtime, channelFactory: { try makeChannelFactory(url: url, configuration: configuration, runtime: runtime) }, body)
    }

    /// ``connect(to:configuration:runtime:_:)`` with the configuration made by `makeConfiguration`
    /// inside the call: for a client whose connection task keeps the caller's frame for the
    /// connection's whole life, a configuration made by the caller would stay there (hundreds of
    /// bytes per idle connection).
    @discardableResult
    package static func connect(
        to url: String,
        runtime: RealtimeRuntime,
        configuration makeConfiguration: () -> WebSocketConfiguration,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        try await connect(to: url, runtime: runtime, channelFactory: { try makeChannelFactory(url: url, makeConfiguration: makeConfiguration, runtime: runtime) }, body)
    }

    /// Both `connect` calls, inlined into each: one frame per connection, whichever is called.
    @inline(__always)
    private static func connect(
        to url: String,
        runtime: RealtimeRuntime,
        channelFactory makeChannelFactory: () throws -> WebSocketClientChannel,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        // This frame lives as long as the connection: it keeps references only. Opening runs in a
        // function of its own (its frame is gone once the connection is open), and what a close
        // means is worked out in synchronous functions.
        let channelFactory = try makeChannelFactory()
        let closeRequested = NIOLockedValueBox(false)
        let closeFrame: WebSocketCloseInfo?
        // `open` and `run` read the configuration from the channel factory: passed here, a copy
        // of it would stay in this frame.
        let opened: OpenedChannel
        do {
            opened = try await open(channelFactory, url: url, runtime: runtime)
        } catch {
            throw failure(error, channelFactory: channelFactory, url: url, established: false)
        }
        do {
            closeFrame = try await run(opened, channelFactory: channelFactory, url: url, runtime: runtime, closeRequested: closeRequested, body)
        } catch {
            throw failure(error, channelFactory: channelFactory, url: url, established: true)
        }
        return try closeInfo(closeFrame, channelFactory: channelFactory, closeRequested: closeRequested, url: url)
    }

    /// Synchronous: the configuration is made on the thread's stack, not in an async frame.
    @inline(never)
    private static func makeChannelFactory(
        url: String, makeConfiguration: () -> WebSocketConfiguration, runtime: RealtimeRuntime
    ) throws -> WebSocketClientChannel {
        try makeChannelFactory(url: url, configuration: makeConfiguration(), runtime: runtime)
    }

    @inline(never)
    private static func makeChannelFactory(
        url: String, configuration: WebSocketConfiguration, runtime: RealtimeRuntime
    ) throws -> WebSocketClientChannel {
        var configuration = configuration
        runtime.injectTraceContext(nil, into: &configuration.headers)
        return try WebSocketClientChannel(url: url, configuration: configuration, timers: runtime.timers, proxy: runtime.proxy)
    }

    /// TCP, TLS and the upgrade, under the connect deadline, in a task of its own that is abandoned
    /// when the deadline passes; the open connection then runs in the caller's task, so a
    /// connection costs no second task.
    ///
    /// A connection's task keeps its stack at the deepest it has been, and opening is the deepest
    /// it goes: what the opening needs across its waits lives in an ``OpenAttempt`` (freed once the
    /// connection is open), not in these frames.
    @inline(never)
    private static func open(
        _ channelFactory: WebSocketClientChannel, url: String, runtime: RealtimeRuntime
    ) async throws -> OpenedChannel {
        let attempt = OpenAttempt(channelFactory, url: url, runtime: runtime)
        // The turn among the set-ups to this host is awaited here, under the same time limit, so
        // that a set-up's task and its memory exist only once it runs (SetUpLimiter).
        try await attempt.waitForTurn()
        return try await attempt.setUp()
    }

    /// One opening of a connection: what its waits need, on the heap.
    private final class OpenAttempt: Sendable {
        let channelFactory: WebSocketClientChannel
        let runtime: RealtimeRuntime
        let connectTimeout: Duration
        let timeoutError: RealtimeError
        let host: String
        let limit: Int
        let waitStarted: Duration
        /// A set-up that holds this host's slot already (a SignalR start) does not wait again.
        let nested: Bool
        let phase = NIOLockedValueBox(ConnectPhase.connecting)

        init(_ channelFactory: WebSocketClientChannel, url: String, runtime: RealtimeRuntime) {
            self.channelFactory = channelFactory
            self.runtime = runtime
            let connectTimeout = channelFactory.configuration.connectTimeout
            self.connectTimeout = connectTimeout
            self.timeoutError = RealtimeError.timeout(
                "the WebSocket connection to \(Redaction.url(url))\(channelFactory.proxy.map { " through the proxy \($0)" } ?? "") was not open within \(connectTimeout)")
            self.host = "\(channelFactory.target.host):\(channelFactory.target.port)"
            self.limit = runtime.http.maxConnectingPerHost
            self.waitStarted = runtime.timers.now
            self.nested = channelFactory.configuration.setUpSlotHeld
        }

        @inline(never)
        func waitForTurn() async throws {
            if nested { return }
            try await runtime.setUpLimiter.acquire(
                host: host, limit: limit, within: connectTimeout, timers: runtime.timers, timeoutError: timeoutError)
        }

        @inline(never)
        func setUp() async throws -> OpenedChannel {
            let opened = try await Deadline.run(
                within: connectTimeout - (runtime.timers.now - waitStarted),
                runtime: runtime,
                isPastDeadlinePhase: { self.phase.withLockedValue { $0 == .open } },
                abandon: { self.phase.withLockedValue { $0 = .abandoned } },
                timeoutError: timeoutError
            ) { () -> OpenedChannel? in try await self.connect(on: self.runtime.eventLoopGroup.next()) }
            guard let opened else { throw CancellationError() }
            return opened
        }

        /// The set-up's own task: the slot is held until the set-up ends, also when its deadline
        /// abandoned it.
        private func connect(on eventLoop: any EventLoop) async throws -> OpenedChannel? {
            let (upgraded, response, extensions) = try await {
                defer { if !nested { runtime.setUpLimiter.release(host: host, limit: limit) } }
                return try await channelFactory.open(on: eventLoop)
            }()
            let abandoned = phase.withLockedValue { phase -> Bool in
                if phase == .abandoned { return true }
                phase = .open
                return false
            }
            if abandoned {
                await WebSocketClientChannel.discard(upgraded)
                return nil
            }
            return OpenedChannel(upgraded: upgraded, response: response, extensions: extensions, eventLoop: eventLoop)
        }
    }

    /// The open connection: `body` runs with it, then the closing handshake. Kept apart from
    /// ``connect(to:configuration:runtime:_:)`` (merged, that frame would hold this one's locals
    /// too, for the connection's whole life).
    @inline(never)
    private static func run(
        _ opened: OpenedChannel, channelFactory: WebSocketClientChannel, url: String,
        runtime: RealtimeRuntime, closeRequested: NIOLockedValueBox<Bool>,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        switch opened.upgraded {
        case .loop(let reader):
            return try await runLoop(
                reader, connection: loopConnection(reader, opened: opened, channelFactory: channelFactory, url: url, closeRequested: closeRequested),
                eventLoop: opened.eventLoop, closeTimeout: channelFactory.configuration.closeTimeout, body)
        case .frames(let asyncChannel):
            return try await runFrames(
                asyncChannel, opened: opened, channelFactory: channelFactory, url: url, runtime: runtime,
                closeRequested: closeRequested, body)
        }
    }

    /// `body` on the connection's event loop, where its messages are decoded: the error it threw,
    /// nil when it returned. Cancelling the task ends the connection: our close frame, then the TCP
    /// connection closed at once (a send waiting for a full socket fails then). A function of its
    /// own whose frame keeps only what the wait needs: it lasts as long as the connection, and
    /// `run`'s frame has room for the other kind of connection's locals too.
    @inline(never)
    private static func runLoop(
        _ reader: WebSocketLoopReader, connection: WebSocketConnection, eventLoop: any EventLoop, closeTimeout: Duration,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        let failure = try await runOnLoop(reader, connection: connection, eventLoop: eventLoop, body)
        // As swift-websocket's handler did: 1000 when the body returned, 1011 when it threw.
        let closed = await reader.finish(code: failure == nil ? 1000 : 1011, timeout: closeTimeout)
        if let failure { throw failure }
        return closed
    }

    @inline(never)
    private static func runOnLoop(
        _ reader: WebSocketLoopReader, connection: WebSocketConnection, eventLoop: any EventLoop,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> (any Error)? {
        try await withEventLoopPreference(eventLoop) {
            await withTaskCancellationHandler {
                do {
                    try await body(connection)
                    return nil
                } catch {
                    return error
                }
            } onCancel: {
                reader.abort()
            }
        }
    }

    /// The connection `body` gets when our handlers run the frame protocol on the event loop.
    @inline(never)
    private static func loopConnection(
        _ reader: WebSocketLoopReader, opened: OpenedChannel, channelFactory: WebSocketClientChannel, url: String,
        closeRequested: NIOLockedValueBox<Bool>
    ) -> WebSocketConnection {
        // Both handlers are installed together (WebSocketClientChannel.configure).
        let writer = channelFactory.loopWriter.withLockedValue { $0 }!
        return WebSocketConnection(
            inbound: WebSocketMessages(source: .loop(reader.messages), url: url),
            outbound: .loop(writer, reader), closeRequested: closeRequested, upgradeResponse: opened.response,
            keepAliveCountsBox: channelFactory.keepAliveCounts,
            protocolPingSender: channelFactory.protocolPingSender.withLockedValue { $0 },
            loopWriter: writer, closeTimeout: channelFactory.configuration.closeTimeout, closeDeadline: nil, abortFrames: nil)
    }

    /// A connection with permessage-deflate: swift-websocket's handler runs the frame protocol around
    /// `body`, on the connection's event loop.
    @inline(never)
    private static func runFrames(
        _ asyncChannel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, opened: OpenedChannel, channelFactory: WebSocketClientChannel,
        url: String, runtime: RealtimeRuntime, closeRequested: NIOLockedValueBox<Bool>,
        _ body: @escaping @Sendable (WebSocketConnection) async throws -> Void
    ) async throws -> WebSocketCloseInfo? {
        let (maxMessageSize, validateUTF8) = (channelFactory.configuration.maxMessageSize, channelFactory.configuration.validateUTF8)
        let (handlerConfiguration, context) = handlerSetup(opened, channelFactory: channelFactory, runtime: runtime)
        let closeTimeout = channelFactory.configuration.closeTimeout
        let channel = asyncChannel.channel
        let timers = runtime.timers
        let closeDeadline: @Sendable () -> Void = {
            _ = timers.schedule(after: closeTimeout) { channel.close(promise: nil) }
        }
        let closeFrame = try await withEventLoopPreference(opened.eventLoop) {
            try await WebSocketHandler.handle(
                type: .client, configuration: handlerConfiguration, asyncChannel: asyncChannel, context: context
            ) { inbound, outbound, _ in
                let connection = WebSocketConnection(
                    inbound: WebSocketMessages(
                        source: .frames(inbound, outbound, maxMessageSize: maxMessageSize, validateUTF8: validateUTF8), url: url),
                    outbound: .frames(outbound), closeRequested: closeRequested, upgradeResponse: opened.response,
                    keepAliveCountsBox: channelFactory.keepAliveCounts,
                    protocolPingSender: channelFactory.protocolPingSender.withLockedValue { $0 },
                    loopWriter: channelFactory.loopWriter.withLockedValue { $0 },
                    closeTimeout: closeTimeout, closeDeadline: closeDeadline, abortFrames: { channel.close(promise: nil) })
                try await body(connection)
            }
        }
        return closeFrame.map { WebSocketCloseInfo(code: UInt16(webSocketErrorCode: $0.closeCode), reason: $0.reason) }
    }

    /// swift-websocket's handler settings. The keep-alive is ours (WebSocketKeepAlive, on the
    /// runtime's timer queue), not a task per connection.
    @inline(never)
    private static func handlerSetup(
        _ opened: OpenedChannel, channelFactory: WebSocketClientChannel, runtime: RealtimeRuntime
    ) -> (WebSocketHandler.Configuration, TransportContext) {
        let configuration = channelFactory.configuration
        let handlerConfiguration = WebSocketHandler.Configuration(
            extensions: opened.extensions, autoPing: AutoPingSetup.disabled, closeTimeout: configuration.closeTimeout,
            validateUTF8: configuration.validateUTF8, maxFrameSize: configuration.maxMessageSize)
        return (handlerConfiguration, TransportContext(logger: runtime.libraryLogger))
    }

    /// The error a failed connection reports: a connection that ended because of a protocol error
    /// reports that error, not the closed channel it caused.
    @inline(never)
    private static func failure(_ error: any Error, channelFactory: WebSocketClientChannel, url: String, established: Bool) -> any Error {
        if let recorded = channelFactory.protocolError.withLockedValue({ $0 }), isEndOfConnection(error) {
            return mapError(recorded, url: url, established: established)
        }
        return mapError(error, url: url, established: established)
    }

    /// How the connection ended, from the server's close frame (nil: none came).
    @inline(never)
    private static func closeInfo(
        _ closeFrame: WebSocketCloseInfo?, channelFactory: WebSocketClientChannel, closeRequested: NIOLockedValueBox<Bool>, url: String
    ) throws -> WebSocketCloseInfo? {
        guard let info = closeFrame else {
            if let recorded = channelFactory.protocolError.withLockedValue({ $0 }) { throw mapError(recorded, url: url, established: true) }
            if closeRequested.withLockedValue({ $0 }) { return nil }
            throw RealtimeError(
                .connectionClosed, "the WebSocket connection ended without a close frame (abnormal closure)", closeCode: 1006,
                stage: .established)
        }
        switch info.code {
        case 1000, 1001, 1005:
            // 1005: a close frame without a code (RFC 6455 section 7.1.5), a normal end.
            return info
        case 1009:
            throw RealtimeError(.messageTooLarge, "the server closed the WebSocket: a message was too large", serverMessage: info.reason, closeCode: info.code)
        default:
            throw RealtimeError(
                .webSocketClosed, "the server closed the WebSocket", serverMessage: info.reason, closeCode: info.code)
        }
    }

    private enum ConnectPhase: Sendable { case connecting, open, abandoned }

    /// An upgraded channel handed from the opening task to the caller's.
    private struct OpenedChannel: @unchecked Sendable {
        // @unchecked Sendable: the extensions (swift-websocket's, not Sendable) are built for this
        // channel and only used by its handler, after the opening task is done with them.
        let upgraded: WebSocketClientChannel.Upgraded
        let response: WebSocketUpgradeResponse
        let extensions: [any WebSocketExtension]
        let eventLoop: any EventLoop
    }

    static func isEndOfConnection(_ error: any Error) -> Bool {
        if let error = error as? RealtimeError { return error.code == .connectionClosed }
        return error is ChannelError || error is NIOWebSocketError
    }

    /// What a WebSocket connection's failure is called: a frame that breaks the rules or is too
    /// large, an invalid upgrade answer, else what any connection's failure is called.
    static func mapError(_ error: any Error, url: String, established: Bool = false) -> any Error {
        switch error {
        case let error as NIOWebSocketError:
            switch error {
            case .invalidFrameLength:
                return RealtimeError(
                    .messageTooLarge, "the server sent a frame larger than maxMessageSize", closeCode: 1009, stage: .established,
                    underlying: error)
            default:
                return RealtimeError(
                    .protocolViolation, "the server broke the WebSocket framing rules", closeCode: 1002, stage: .established,
                    underlying: error)
            }
        case let error as NIOHTTPClientUpgradeError:
            return RealtimeError(.protocolViolation, "the server's answer to the WebSocket upgrade is invalid", stage: .response, underlying: error)
        default:
            return SocketConnection.mapError(error, url: url, established: established)
        }
    }
}

/// The context swift-websocket's frame handler logs through.
struct TransportContext: WebSocketContext {
    let logger: Logger
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
