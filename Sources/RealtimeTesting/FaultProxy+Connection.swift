import DequeModule
import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One client connection and its connection to the target. Every member is used on `eventLoop` only
/// (both channels live there), which is why the class can be `@unchecked Sendable`.
///
/// Side 0 is the client's channel, side 1 the target's; direction `d` carries bytes read on side `d`
/// to side `1 - d`.
final class ProxyConnection: @unchecked Sendable {
    /// Reading stops while this many bytes wait in one direction (held by a stall or latency).
    static let holdLimit = 1 << 20

    let proxy: FaultProxy
    let client: any Channel
    let eventLoop: any EventLoop
    private var target: (any Channel)?
    private var queues: [Deque<(due: NIODeadline, bytes: ByteBuffer)>] = [[], []]
    private var queued = [0, 0]
    private var readHeld = [false, false]
    private var contexts: [ChannelHandlerContext?] = [nil, nil]
    private var drainTimers: [Scheduled<Void>?] = [nil, nil]
    /// The source of that direction ended: close the other side once what it sent is forwarded.
    private var sourceEnded = [false, false]
    private var closed = false
    /// The `CONNECT` request's bytes read so far, while a proxy with a connect front waits for it
    /// (nil: no request expected, or answered).
    private var connectRequest: ByteBuffer?
    /// The largest `CONNECT` request head read.
    static let connectHeadLimit = 16 << 10

    init(proxy: FaultProxy, client: any Channel) {
        self.proxy = proxy
        self.client = client
        self.eventLoop = client.eventLoop
    }

    private func channel(_ side: Int) -> (any Channel)? { side == 0 ? client : target }

    func attach(_ context: ChannelHandlerContext, side: Int) { contexts[side] = context }

    /// The channel of `side` removed its handlers (it closed): the context goes, which breaks the
    /// cycle connection -> context -> handler -> connection that kept every closed connection,
    /// with both its channels, alive (about 25 KB per connection in a soak run).
    func detach(side: Int) { contexts[side] = nil }

    func clientActive() {
        if proxy.hasConnectFront {
            connectRequest = ByteBuffer()
            return
        }
        connectTarget()
    }

    /// Reads the `CONNECT` request and answers it; opens the tunnel when the answer is 200.
    private func receivedConnect(_ bytes: ByteBuffer) {
        connectRequest!.writeImmutableBuffer(bytes)
        let view = connectRequest!.readableBytesView
        guard let end = view.firstRange(of: Array("\r\n\r\n".utf8)) else {
            if view.count > Self.connectHeadLimit { close(mode: .fin) }
            return
        }
        let head = String(decoding: view[view.startIndex..<end.lowerBound], as: UTF8.self)
        var rest = connectRequest!
        rest.moveReaderIndex(to: end.upperBound)
        connectRequest = nil
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let requestLine = lines.first?.split(separator: " ") ?? []
        let authorization = lines.dropFirst().first { $0.lowercased().hasPrefix("proxy-authorization:") }
            .map { $0.dropFirst("proxy-authorization:".count).trimmingCharacters(in: .whitespaces) }
        guard requestLine.count == 3, requestLine[0] == "CONNECT" else {
            respond(status: 400, close: true)
            return
        }
        let (status, closeAfter) = proxy.answer(connect: String(requestLine[1]), proxyAuthorization: authorization)
        guard let status else {
            if closeAfter { close(mode: .fin) }
            return
        }
        respond(status: status, close: closeAfter)
        guard !closeAfter else { return }
        if rest.readableBytes > 0 {
            queues[0].append((.now(), rest))
            queued[0] += rest.readableBytes
        }
        connectTarget()
    }

    private func respond(status: Int, close closeAfter: Bool) {
        let reason = [200: "Connection established", 400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"][status] ?? "Refused"
        var text = "HTTP/1.1 \(status) \(reason)\r\n"
        if status == 407 { text += "Proxy-Authenticate: Basic realm=\"FaultProxy\"\r\n" }
        text += status == 200 ? "\r\n" : "Content-Length: 0\r\nConnection: close\r\n\r\n"
        let written = client.writeAndFlush(ByteBuffer(string: text))
        if closeAfter { written.whenComplete { [self] _ in close(mode: .fin) } }
    }

    private func connectTarget() {
        let bootstrap = ClientBootstrap(group: eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(5))
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ProxySideHandler(connection: self, side: 1))
                }
            }
        // An IP literal without NIO's getaddrinfo, which waits for a Dispatch thread in a busy process.
        let connecting =
            if let address = try? SocketAddress(ipAddress: proxy.targetHost, port: proxy.targetPort) {
                bootstrap.connect(to: address)
            } else {
                bootstrap.connect(host: proxy.targetHost, port: proxy.targetPort)
            }
        connecting.whenComplete { [self] result in
                switch result {
                case .success(let channel):
                    if closed {
                        channel.close(promise: nil)
                        return
                    }
                    target = channel
                    drain(0)
                    resumeRead(0)
                    resumeRead(1)
                case .failure:
                    proxy.targetConnectFailed()
                    close(mode: .fin)
                }
            }
    }

    /// Whether side `side` may read now: its bytes have somewhere to go and are not piling up.
    func mayRead(_ side: Int) -> Bool {
        if side == 0, connectRequest != nil { return !closed }
        guard !closed, let destination = channel(1 - side) else { return false }
        if proxy.conditions(direction: side).stalled { return false }
        return destination.isWritable && queued[side] < Self.holdLimit
    }

    func holdRead(_ side: Int) { readHeld[side] = true }

    private func resumeRead(_ side: Int) {
        guard readHeld[side], mayRead(side), let context = contexts[side] else { return }
        readHeld[side] = false
        context.read()
    }

    func received(_ bytes: ByteBuffer, on side: Int) {
        guard !closed else { return }
        if side == 0, connectRequest != nil { return receivedConnect(bytes) }
        let latency = proxy.conditions(direction: side).latency
        let due = NIODeadline.now() + .nanoseconds(latency.nanoseconds)
        queues[side].append((due, bytes))
        queued[side] += bytes.readableBytes
        if side == 1 { proxy.noteQueuedForClient(bytes.readableBytes) }
        drain(side)
    }

    /// Forwards what is due in direction `direction`, unless it is stalled.
    func drain(_ direction: Int) {
        guard !closed, let destination = channel(1 - direction) else { return }
        if proxy.conditions(direction: direction).stalled || proxy.isHeld(direction: direction) { return }
        var wrote = false
        while let head = queues[direction].first {
            if head.due > .now() {
                if drainTimers[direction] == nil {
                    drainTimers[direction] = eventLoop.scheduleTask(deadline: head.due) { [self] in
                        drainTimers[direction] = nil
                        drain(direction)
                    }
                }
                break
            }
            queues[direction].removeFirst()
            queued[direction] -= head.bytes.readableBytes
            if direction == 1 { proxy.noteQueuedForClient(-head.bytes.readableBytes) }
            var bytes = head.bytes
            let (allowed, fire) = proxy.consume(bytes.readableBytes, direction: direction, connection: ObjectIdentifier(self))
            if allowed == 0 && fire == nil { continue }
            if allowed < bytes.readableBytes { bytes = bytes.getSlice(at: bytes.readerIndex, length: allowed)! }
            if let fire {
                // The trigger's last byte: deliver it, then cut every connection (this one included).
                let proxy = self.proxy
                destination.writeAndFlush(bytes).whenComplete { _ in proxy.fireCut(fire) }
                return
            }
            destination.write(bytes, promise: nil)
            wrote = true
        }
        if wrote { destination.flush() }
        if queues[direction].isEmpty, sourceEnded[direction] {
            destination.writeAndFlush(ByteBuffer()).whenComplete { [self] _ in close(mode: .fin) }
            return
        }
        resumeRead(direction)
    }

    func writabilityChanged(on side: Int) {
        // Side `side` can take bytes again: read from the other side.
        resumeRead(1 - side)
    }

    func resumeAll() {
        drain(0)
        drain(1)
        resumeRead(0)
        resumeRead(1)
    }

    func ended(_ side: Int) {
        guard !closed else { return }
        sourceEnded[side] = true
        if target == nil || proxy.conditions(direction: side).stalled && queues[side].isEmpty {
            close(mode: .fin)
            return
        }
        drain(side)
    }

    func close(mode: FaultProxy.CutMode) {
        guard !closed else { return }
        closed = true
        for timer in drainTimers { timer?.cancel() }
        if queued[1] > 0 { proxy.noteQueuedForClient(-queued[1]) }
        queues = [[], []]
        queued = [0, 0]
        for side in 0...1 {
            guard let channel = channel(side) else { continue }
            if mode == .reset, let provider = channel as? any SocketOptionProvider {
                provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
            } else {
                channel.close(promise: nil)
            }
        }
    }
}

/// The proxy's handler on both channels of a connection: passes reads on, and holds the channel's
/// reads while the other side cannot take more.
final class ProxySideHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let connection: ProxyConnection
    private let side: Int

    init(connection: ProxyConnection, side: Int) {
        self.connection = connection
        self.side = side
    }

    func handlerAdded(context: ChannelHandlerContext) {
        connection.attach(context, side: side)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connection.detach(side: side)
    }

    func channelActive(context: ChannelHandlerContext) {
        if side == 0 { connection.clientActive() }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        connection.received(unwrapInboundIn(data), on: side)
    }

    func read(context: ChannelHandlerContext) {
        if connection.mayRead(side) {
            context.read()
        } else {
            connection.holdRead(side)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { connection.writabilityChanged(on: side) }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.ended(side)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connection.close(mode: .fin)
    }
}
