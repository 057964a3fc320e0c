import NIOCore
import NIOHTTP1

/// The top of an event stream's channel: writes the request, reads the response with
/// `HTTPStreamResponseParser`, and hands what it reads to its ``EventStream``, all on the event loop.
///
/// Body bytes of one read are parsed as they come and delivered at the read's end, once
/// (`EventStream.connectionReadComplete(attempt:)`). When the stream says its consumer is behind,
/// the handler holds the channel's next `read` until a ``Resume`` event comes down the pipeline:
/// the server's writes then wait on TCP.
final class HTTPStreamHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Sent down the pipeline (`triggerUserOutboundEvent`) to read again after a pause.
    struct Resume: Sendable {}

    private let stream: EventStream
    /// Which of the stream's requests this is (a redirect makes the next one).
    private let attempt: Int
    private var request: ByteBuffer?
    private var parser: HTTPStreamResponseParser
    private var paused = false
    private var readHeld = false
    /// The response ended, failed or was given up: nothing more is reported.
    private var ended = false
    /// Inside the parser (whose reports may close the channel, which reenters this handler).
    private var parsing = false

    init(stream: EventStream, attempt: Int, request: ByteBuffer, isHeadRequest: Bool) {
        self.stream = stream
        self.attempt = attempt
        self.request = request
        parser = HTTPStreamResponseParser(isHeadRequest: isHeadRequest)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { sendRequest(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendRequest(context: context)
        context.fireChannelActive()
    }

    private func sendRequest(context: ChannelHandlerContext) {
        guard let request else { return }
        self.request = nil
        context.writeAndFlush(wrapOutboundOut(request), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !ended else { return }
        let (stream, attempt) = (self.stream, self.attempt)
        parsing = true
        defer { parsing = false }
        do {
            let complete = try parser.parse(
                unwrapInboundIn(data),
                onHead: { status, headers in
                    if !stream.connectionReceivedHead(status: status, headers: headers, attempt: attempt) { throw StopReading() }
                },
                onBody: { stream.connectionReceivedBody($0, attempt: attempt) })
            if complete { end(context: context, error: nil) }
        } catch is StopReading {
            // A redirect, or a head that ends the stream: the stream goes on without this connection.
            ended = true
            context.close(promise: nil)
        } catch {
            end(context: context, error: error)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if !ended, !stream.connectionReadComplete(attempt: attempt) { paused = true }
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if paused {
            readHeld = true
        } else {
            context.read()
        }
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard event is Resume else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        promise?.succeed()
        paused = false
        if readHeld {
            readHeld = false
            context.read()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !ended, parsing {
            // Closed from within one of the parser's reports: the stream closed it and has its reason.
            end(context: context, error: ChannelError.ioOnClosedChannel)
        } else if !ended {
            do {
                try parser.inputClosed()
                end(context: context, error: nil)
            } catch {
                end(context: context, error: error)
            }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end(context: context, error: error)
    }

    /// Reports the response's end (nil: complete) once, with what the last read carried, and closes.
    private func end(context: ChannelHandlerContext, error: (any Error)?) {
        guard !ended else { return }
        ended = true
        _ = stream.connectionReadComplete(attempt: attempt)
        stream.connectionEnded(error, attempt: attempt)
        context.close(promise: nil)
    }

    private struct StopReading: Error {}
}
