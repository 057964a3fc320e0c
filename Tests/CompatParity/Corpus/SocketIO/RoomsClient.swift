// Several namespaces on one manager, the manager's settings changed at run time, a manual
// reconnect, handlers removed, and an app-level typealias of the library's callback types.
import Foundation
import SocketIO

typealias RoomHandler = NormalCallback

final class RoomsClient {
    let manager: SocketManager
    private var rooms: [String: SocketIOClient] = [:]

    init(url: URL) {
        manager = SocketManager(socketURL: url, config: ["log": false, "reconnects": true, "forceWebsockets": true])
        manager.reconnectWait = 1
        manager.randomizationFactor = 0.2
    }

    func join(_ room: String, handler: @escaping RoomHandler) {
        let socket = manager.socket(forNamespace: "/\(room)")
        rooms[room] = socket
        socket.on("message", callback: handler)
        socket.on(clientEvent: .connect) { data, ack in
            socket.emit("hello", room, completion: { print("said hello to \(room)") })
        }
        socket.connect()
    }

    func leave(_ room: String) {
        guard let socket = rooms.removeValue(forKey: room) else { return }
        socket.off("message")
        socket.removeAllHandlers()
        manager.disconnectSocket(socket)
    }

    func refresh() {
        if manager.status == .connected {
            manager.reconnect()
        }
    }

    func broadcast(_ text: String) {
        manager.emitAll("broadcast", text)
        for (name, socket) in manager.nsps where socket.status.active {
            print("sent to \(name) as \(socket.sid ?? "-")")
        }
    }

    func ask(_ room: String, _ question: String, answer: @escaping AckCallback) {
        rooms[room]?.emitWithAck("question", with: [question]).timingOut(after: 0, callback: answer)
    }
}
